"""Rows that are held only by their partition's quarantine (issue 15).

A row stores its own verdict (`valid`, `invalid`, `pending`); it is held exactly when its
partition is quarantined. These factories store verdicts only, never 'held', so a consumer
that still reads `validation_state` for holds shows the rows as valid or invalid and fails.
"""

from __future__ import annotations

from recovery.models import Observation, Run, RunPartition, Task
from tests.support.factories import make_observation, make_tasks


def quarantine(run: Run, name: str) -> RunPartition:
    return RunPartition.objects.create(
        run=run, name=name, quarantined=True, quarantine_reason="rule price_positive"
    )


def observe(task: Task, verdict: str) -> Observation:
    """One observation of `task` in the task's partition, stored with `verdict`."""
    assert verdict != Observation.Validation.HELD, "held is derived, never stored here"
    run = Run.objects.select_related("dataset").get(pk=task.run_id)
    return make_observation(run, task, {"title": f"Item {task.pk}"}, state=verdict)


def held_run(run: Run) -> dict[str, list[Task]]:
    """Partition `good` (not quarantined): verdicts valid, valid, invalid, pending; partition
    `bad` (quarantined): verdicts valid, valid, invalid. Shown: 2 valid, 1 invalid, 1 pending,
    3 held. Every task committed. A second run quarantines a partition named `good`, which
    must not hold this run's rows."""
    tasks = {
        "good": make_tasks(run, 4, partition="good", state="committed", host="good.test"),
        "bad": make_tasks(run, 3, partition="bad", state="committed", host="bad.test"),
    }
    for task, verdict in zip(tasks["good"], ("valid", "valid", "invalid", "pending"), strict=True):
        observe(task, verdict)
    for task, verdict in zip(tasks["bad"], ("valid", "valid", "invalid"), strict=True):
        observe(task, verdict)
    quarantine(run, "bad")
    RunPartition.objects.create(run=_other_run(run), name="good", quarantined=True)
    return tasks


SHOWN = {"valid": 2, "invalid": 1, "pending": 1, "held": 3}


def _other_run(run: Run) -> Run:
    return Run.objects.create(dataset=run.dataset, window=f"{run.window}-other")
