"""Run acceptance: collecting -> candidate -> accepted -> published; candidate -> rejected.

`advance_runs()` is the periodic step (dispatcher tick, end of `work --until-idle`): it finishes
recovery batches whose tasks are terminal, moves every collecting run whose tasks are all
terminal to candidate, evaluates its rules and auto-accepts when the dataset says so.

Accepting and publishing write an OutboxEvent in the same transaction as the move (the
transactional outbox): the run can never be accepted without its announcement existing, and a
crash before delivery leaves the event for the next delivery pass. Delivery never touches
tasks, so repeating it can never trigger a collection (guarantee 8).
"""

from __future__ import annotations

from django.db import transaction

from recovery import audit, counters, faults
from recovery.delivery import latest, outbox, partial
from recovery.models import OutboxEvent, RecoveryBatch, Run, Task
from recovery.quality import provisional, validation
from recovery.states import row_states
from recovery.states import run as run_states
from recovery.states.choices import RunState
from recovery.states.task import TERMINAL

SYSTEM = "system"


class AcceptanceError(ValueError):
    """A run that cannot make the requested move (unknown, wrong state, rules failing)."""


class RulesFail(AcceptanceError):
    """A candidate whose rules failed at the evaluation Accept judged: `run_id` says whose,
    so a caller can name the rules and partitions at fault (recovery.quality.holdups)."""

    def __init__(self, run_id: int, failures: list[str]):
        super().__init__(f"run {run_id} fails its rules: " + "; ".join(failures))
        self.run_id = run_id


def _locked_run(run_id: int) -> Run:
    run = Run.objects.select_for_update().select_related("dataset").filter(pk=run_id).first()
    if run is None:
        raise AcceptanceError(f"run {run_id} does not exist")
    return run


def all_tasks_terminal(run_id: int) -> bool:
    """True when the run has tasks and none is pending, leased or waiting (from the counters,
    so this stays cheap at a million tasks)."""
    states = counters.by_state(run_id)
    if not any(states.values()):
        return False
    return all(state in TERMINAL for state, n in states.items() if n)


def _summary(run: Run) -> dict:
    counts = row_states.state_counts(run.pk)
    return {
        "run": run.pk,
        "dataset": run.dataset.name,
        "window": run.window,
        "scraper_version": run.scraper_version,
        "observations": counts.get(row_states.VALID, 0),
        "held": counts.get(row_states.HELD, 0),
        "invalid": counts.get(row_states.INVALID, 0),
        # Partial results travel with the announcement (a provider job's stopped_reason, the
        # run's coverage_note): empty strings when the run is complete.
        **partial.marks(run).as_dict(),
    }


def make_candidate(run_id: int) -> bool:
    """collecting -> candidate when every task is terminal; evaluates the rules. True if moved."""
    if not all_tasks_terminal(run_id):
        return False
    with transaction.atomic():
        run = _locked_run(run_id)
        if run.acceptance_state != RunState.COLLECTING or not all_tasks_terminal(run_id):
            return False
        run_states.move(run_id, RunState.COLLECTING, RunState.CANDIDATE, state_reason="")
    # Evaluated after the move, outside its transaction (a long read must not hold the write
    # lock). After a recovery batch only the repaired partitions were re-marked (at batch
    # completion); the first evaluation marks every partition. advance_runs auto-accepts on
    # this evaluation (evaluated once from candidate to accepted); an operator's accept_run
    # evaluates again, so a crash in between leaves nothing unjudged.
    had_batch = RecoveryBatch.objects.filter(run_id=run_id).exists()
    result = validation.evaluate(run_id, mark=set() if had_batch else None)
    audit.record(
        SYSTEM,
        "run_candidate",
        run,
        "all tasks terminal",
        passed=result.passed,
        failures=result.failures,
        quarantined=result.quarantined,
    )
    return True


def promote_if_ready(run_id: int, *, just_evaluated: bool = False) -> bool:
    """Auto-accept a candidate whose rules pass, when its dataset has auto_accept on.
    `just_evaluated`: make_candidate evaluated it a moment ago, so its stored results stand."""
    run = Run.objects.select_related("dataset").filter(pk=run_id).first()
    if run is None or run.acceptance_state != RunState.CANDIDATE or not run.dataset.auto_accept:
        return False
    try:
        accept_run(run_id, SYSTEM, evaluate=not just_evaluated)
    except AcceptanceError:
        return False  # rules fail: stays candidate for an admin to reject or repair
    return True


def ready_to_advance() -> bool:
    """True when advance_runs() has something to do (cheap: counters and indexed lookups)."""
    for batch_id in RecoveryBatch.objects.filter(state=RecoveryBatch.State.RUNNING).values_list(
        "pk", flat=True
    ):
        if not Task.objects.filter(recovery_batch_id=batch_id).exclude(state__in=TERMINAL).exists():
            return True
    return (
        any(
            all_tasks_terminal(run_id)
            for run_id in Run.objects.filter(acceptance_state=RunState.COLLECTING).values_list(
                "pk", flat=True
            )
        )
        or provisional.due()
    )


def advance_runs() -> int:
    """One step: complete finished recovery batches, make candidates, auto-accept.

    Returns the number of runs or batches that moved (0 = nothing to do).
    """
    from recovery.quality import reruns

    moved = reruns.complete_ready_batches()
    collecting = list(
        Run.objects.filter(acceptance_state=RunState.COLLECTING).values_list("pk", flat=True)
    )
    for run_id in collecting:
        if make_candidate(run_id):
            moved += 1
            promote_if_ready(run_id, just_evaluated=True)
    # Early warning while runs collect; the decision itself is make_candidate's evaluation.
    provisional.check_due()
    return moved


def evaluate_run(run_id: int, actor: str) -> validation.Evaluation:
    """Re-evaluate a run's rules on demand (the dashboard's "revalidate")."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise AcceptanceError(f"run {run_id} does not exist")
    if run.acceptance_state == RunState.COLLECTING:
        raise AcceptanceError(f"run {run_id} is still collecting")
    result = validation.evaluate(run_id)
    audit.record(actor, "evaluate_run", run, "", passed=result.passed, failures=result.failures)
    return result


def accept_run(run_id: int, actor: str, *, evaluate: bool = True) -> Run:
    """candidate -> accepted, only when the rules pass; writes the `accepted` outbox event.

    evaluate=False accepts on the stored results of an evaluation made since the run became a
    candidate (advance_runs, right after make_candidate: a candidate's data cannot change while
    it stays one, and the guarded move below notices if it did not stay one)."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise AcceptanceError(f"run {run_id} does not exist")
    if evaluate and run.acceptance_state == RunState.CANDIDATE:
        # Judge the data as it is now (a candidate's tasks are all terminal, so it cannot
        # change until a recovery batch moves the run away from candidate, which the guarded
        # move below would notice).
        validation.evaluate(run_id, mark=set())
    with transaction.atomic():
        run = _locked_run(run_id)
        if run.acceptance_state != RunState.CANDIDATE:
            raise AcceptanceError(
                f"run {run_id} is {run.acceptance_state}; only a candidate can be accepted"
            )
        failures = validation.stored_failures(run_id)
        if failures:
            raise RulesFail(run_id, failures)
        if not run_states.move(
            run_id, RunState.CANDIDATE, RunState.ACCEPTED, accepted_by=actor, state_reason=""
        ):
            raise AcceptanceError(f"run {run_id} changed state meanwhile")
        run.refresh_from_db()
        event = outbox.enqueue(run, OutboxEvent.Kind.ACCEPTED, _summary(run))
        audit.record(actor, "accept_run", run, "", event=str(event.pk))
    faults.point("after_accept")  # crash tests: accepted and committed, nothing delivered
    return run


def reject_run(run_id: int, actor: str, reason: str) -> Run:
    """candidate -> rejected with a reason. The run's previous accepted dataset stays current."""
    reason = (reason or "").strip()
    if not reason:
        raise AcceptanceError("rejecting a run needs a reason")
    with transaction.atomic():
        run = _locked_run(run_id)
        if run.acceptance_state != RunState.CANDIDATE:
            raise AcceptanceError(
                f"run {run_id} is {run.acceptance_state}; only a candidate can be rejected"
            )
        run_states.move(run_id, RunState.CANDIDATE, RunState.REJECTED, state_reason=reason)
        run.refresh_from_db()
        audit.record(actor, "reject_run", run, reason)
    return run


def publish_run(run_id: int, actor: str) -> Run:
    """accepted -> published; writes the `published` outbox event in the same transaction."""
    with transaction.atomic():
        run = _locked_run(run_id)
        if run.acceptance_state != RunState.ACCEPTED:
            raise AcceptanceError(
                f"run {run_id} is {run.acceptance_state}; only an accepted run can be published"
            )
        if not run_states.move(run_id, RunState.ACCEPTED, RunState.PUBLISHED):
            raise AcceptanceError(f"run {run_id} changed state meanwhile")
        # Each entity's latest value (recovery.delivery.latest), with the move or not at all.
        latest.publish(run)
        run.refresh_from_db()
        event = outbox.enqueue(run, OutboxEvent.Kind.PUBLISHED, _summary(run))
        audit.record(actor, "publish_run", run, "", event=str(event.pk))
    return run
