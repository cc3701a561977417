"""What a consequential action will do, said before it is done (the confirmation pages).

Each function reads, changes nothing, and returns a `Consequence`: the sentences the operator
confirms, and the reasons the action would be refused now (then the page offers no button).
The action itself stays the engine's (acceptance, reconcile), which checks again under its
own lock: a confirmation page is an explanation, not a guard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recovery import exports, figures, row_states
from recovery.models import RemoteJob, Run, RunPartition, Schedule
from recovery.states.remote_job import RECONCILE
from recovery.states.run import RunState


@dataclass
class Consequence:
    effects: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def _current(run: Run) -> str:
    current = exports.current_run(run.dataset.name)
    if current is None or current.pk == run.pk:
        return f"dataset {run.dataset.name} has no other accepted run"
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
    result.effects = [
        f"{_plural(rows.get(row_states.VALID, 0), 'valid row')} of run #{run.pk} "
        f"become the current dataset {run.dataset.name}, replacing {_current(run)}.",
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
        f"The current dataset stays {_current(run)}.",
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
