"""What a consequential action will do, said before it is done (the confirmation pages).

Each function reads, changes nothing, and returns a `Consequence`: the sentences the operator
confirms, and the reasons the action would be refused now (then the page offers no button).
The action itself stays the engine's (acceptance, reconcile), which checks again under its
own lock: a confirmation page is an explanation, not a guard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recovery.delivery import exports
from recovery.models import RemoteJob, Run, RunPartition, Schedule
from recovery.quality import figures
from recovery.states import row_states
from recovery.states.choices import RunState
from recovery.states.remote_job import RECONCILE


@dataclass
class Consequence:
    effects: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def _current(run: Run) -> str | None:
    """The run that now makes the dataset current, described; None when no other run does."""
    current = exports.current_run(run.dataset.name)
    if current is None or current.pk == run.pk:
        return None
    return f"run #{current.pk} (window {current.window}, {current.acceptance_state})"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def accept(run: Run) -> Consequence:
    result = Consequence()
    if run.acceptance_state != RunState.CANDIDATE:
        result.refusals.append(
            f"run #{run.pk} is {run.acceptance_state}; only a candidate can be accepted"
        )
    result.refusals += [f"fails {check.failure}" for check in figures.acceptance_failures(run)]
    rows = row_states.state_counts(run.pk)
    held = RunPartition.objects.filter(run=run, quarantined=True).count()
    current = _current(run)
    replacing = (
        f", replacing {current}"
        if current
        else f" (dataset {run.dataset.name} has no other accepted run to replace)"
    )
    result.effects = [
        f"{_plural(rows.get(row_states.VALID, 0), 'valid row')} of run #{run.pk} "
        f"become the current dataset {run.dataset.name}{replacing}.",
        f"Left out: {_plural(rows.get(row_states.HELD, 0), 'held row')} "
        f"(in {_plural(held, 'quarantined partition')}) and "
        f"{_plural(rows.get(row_states.INVALID, 0), 'invalid row')}.",
        "An 'accepted' event is written to the outbox and delivered to the destination.",
        "Staff can download the rows at once; the action is recorded in the audit log.",
    ]
    return result


def reject(run: Run) -> Consequence:
    result = Consequence()
    if run.acceptance_state != RunState.CANDIDATE:
        result.refusals.append(
            f"run #{run.pk} is {run.acceptance_state}; only a candidate can be rejected"
        )
    result.effects = [
        f"Run #{run.pk} becomes rejected: none of its rows is ever exported or delivered.",
        (
            f"The current dataset {run.dataset.name} stays {current}."
            if (current := _current(run))
            else f"Dataset {run.dataset.name} stays without a current run: it has no other "
            "accepted run."
        ),
        "A recovery batch can reopen the run later; the reason is recorded in the audit log.",
    ]
    return result


def publish(run: Run) -> Consequence:
    result = Consequence()
    if run.acceptance_state != RunState.ACCEPTED:
        result.refusals.append(
            f"run #{run.pk} is {run.acceptance_state}; only an accepted run can be published"
        )
    valid = row_states.state_counts(run.pk).get(row_states.VALID, 0)
    result.effects = [
        f"The {_plural(valid, 'valid row')} of run #{run.pk} become the published dataset "
        f"{run.dataset.name}: a 'published' event is written to the outbox and delivered.",
        "After publication a changed value becomes a new version of its row (a correction), "
        "never a silent overwrite.",
        "The action is recorded in the audit log.",
    ]
    return result


def _open(job: RemoteJob) -> list[str]:
    if job.state in RECONCILE:
        return []
    return [f"remote job #{job.pk} is {job.state}; only unknown or lookup_failed jobs are resolved"]


def replace(job: RemoteJob) -> Consequence:
    held = figures.held_by_jobs([job.pk]).get(job.pk, 0)
    result = Consequence(refusals=_open(job))
    if not held and not result.refusals:
        result.refusals.append(f"remote job #{job.pk} holds no task any more")
    result.effects = [
        f"A new {job.provider} {job.kind} job is submitted for the {_plural(held, 'task')} "
        f"remote job #{job.pk} holds: a new paid provider job.",
        f"Remote job #{job.pk} becomes replaced and can never commit these tasks.",
        "If the provider did create the original job after all, you pay for both; the rows "
        "are still stored once (by their keys).",
        "Your reason is recorded in the audit log.",
    ]
    return result


def dismiss(job: RemoteJob) -> Consequence:
    held = figures.held_by_jobs([job.pk]).get(job.pk, 0)
    result = Consequence(refusals=_open(job))
    result.effects = [
        f"The {_plural(held, 'task')} remote job #{job.pk} holds end dead "
        "(error class remote_dismissed); nothing is imported and nothing is sent to "
        f"{job.provider}.",
        "A recovery batch can run those tasks again later.",
        "Your reason is recorded in the audit log.",
    ]
    return result


def remove_schedule(schedule: Schedule, next_window: str | None) -> Consequence:
    when = f"its next window would be {next_window}" if next_window else "it has no next window"
    if schedule.paused:
        when = "it is paused"
    last = (
        f"the last one is run #{schedule.last_run_id}, window {schedule.last_window}"
        if schedule.last_run_id
        else "it has made none yet"
    )
    return Consequence(
        effects=[
            f"Schedule {schedule} is deleted: the dispatcher makes no more runs of dataset "
            f"{schedule.dataset.name} from it ({when}).",
            f"The runs it made stay, with their tasks and rows ({last}).",
            "Its settings and your reason are recorded in the audit log (schedule_removed).",
        ]
    )


# --- bulk actions (a list's selected rows; the counts are the engine's own) --------------------


def rerun_selected(tasks: int, by_state: dict[str, int], run: Run) -> Consequence:
    states = ", ".join(f"{n} {state}" for state, n in sorted(by_state.items())) or "none"
    return Consequence(
        effects=[
            f"One recovery batch of run #{run.pk} resets {_plural(tasks, 'settled task')} "
            f"({states}) to pending, to run again with the scraper version you give.",
            "Accepted data stays available meanwhile; the run is re-evaluated when the batch "
            "completes.",
            "The batch, its reason and its tasks are recorded in the audit log "
            "(create_recovery_batch), as a batch made from the quarantine page is.",
        ]
    )


def decide_selected(decision: str, jobs: list[RemoteJob]) -> Consequence:
    held = figures.held_by_jobs([job.pk for job in jobs])
    tasks = _plural(sum(held.values()), "task")
    result = Consequence()
    if decision == "replace":
        result.refusals = [
            f"remote job #{job.pk} holds no task any more" for job in jobs if not held.get(job.pk)
        ]
        result.effects = [
            f"{_plural(len(jobs), 'new provider job')} (one per selected job, {tasks} in all) "
            "are submitted: new paid jobs.",
            f"The {_plural(len(jobs), 'selected remote job')} become replaced and can never "
            "commit their tasks.",
            "If the provider did create an original job after all, you pay for both; the rows "
            "are still stored once (by their keys).",
        ]
    else:
        result.effects = [
            f"The {tasks} the {_plural(len(jobs), 'selected remote job')} hold end dead (error "
            "class remote_dismissed); nothing is imported and nothing is sent to a provider.",
            "A recovery batch can run those tasks again later.",
        ]
    result.effects.append(
        "Your reason is recorded on each job and in the audit log, one entry per job, as "
        "deciding each alone would. All or none: if one cannot be decided, none is."
    )
    return result


def retry_selected(events: int, every_failing: bool) -> Consequence:
    which = "every failing delivery (failed or uncertain)" if every_failing else "the selection"
    counted = "1 delivery becomes" if events == 1 else f"{events} deliveries become"
    return Consequence(
        effects=[
            f"{counted} due now ({which}) and will be sent again by the delivery loop; an "
            "uncertain one is looked up at its destination before any resend.",
            "No collection runs again: delivering never reads or writes tasks.",
            "Each retry is recorded in the audit log (retry_delivery), one entry per delivery.",
        ]
    )


def pause_selected(schedules: int, paused: bool) -> Consequence:
    if paused:
        effect = (
            f"{_plural(schedules, 'schedule')}: the dispatcher makes no run for them until "
            "they are resumed."
        )
    else:
        effect = (
            f"{_plural(schedules, 'schedule')}: the dispatcher makes their next windows' runs; "
            "windows missed while paused follow each schedule's catch-up policy."
        )
    action = "schedule_paused" if paused else "schedule_resumed"
    return Consequence(
        effects=[
            effect,
            f"Each change and your reason are recorded in the audit log ({action}), one entry "
            "per schedule.",
        ]
    )


def regenerate(job: RemoteJob) -> Consequence:
    """Regenerating a media job's missing result (recovery.remote.handoff.regenerate_media)."""
    result = Consequence()
    if job.handoff_state != "missing":
        result.refusals.append(
            f"remote job #{job.pk}'s handoff is {job.handoff_state or 'not started'}; only a "
            "result the provider answered 404/410 for is regenerated (refresh its link first)"
        )
    tasks = len((job.input_ref or {}).get("tasks", []))
    result.effects = [
        f"Creates a new paid {job.provider} job: a recovery batch of the "
        f"{_plural(tasks, 'task')} of remote job #{job.pk} submits the media again, and the "
        "provider charges for processing it again.",
        f"The provider answered that object {job.result_ref} is gone, so a fresh link cannot "
        "bring it back (an expired link would only need Refresh link, which costs nothing).",
        f"Remote job #{job.pk}'s handoff becomes regenerated; the new job's result is handed "
        "off to the consumer as its own.",
        "Your reason is recorded in the audit log.",
    ]
    return result
