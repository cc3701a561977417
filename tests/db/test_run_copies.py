"""The run copies (recovery.models, RUN_COPY) without a database foreign key.

Attempt.run, Observation.run and TaskCountDelta.run carry no database constraint: the claim
and the commit copy them from the task rows they move. These tests hold every copy the
engine's own claim and commit write (a worker's commit, a lease taken over, a lost lease,
discovered children) to its task's run, on SQLite and on PostgreSQL, and check that deleting a
run with the ORM still takes its rows with it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import ProtectedError
from django.utils import timezone

from recovery import leases
from recovery.models import Attempt, Observation, Run, Task, TaskCountDelta
from recovery.outcomes import Discovered, ErrorClass, Observed, Outcome
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db


def _work(dataset) -> tuple[tuple[Run, Run], int]:
    """Two runs of one dataset, each with committed, retried, taken-over and lost tasks;
    returns them and the number of observations committed."""
    runs = (make_run(dataset), make_run(dataset))
    for run in runs:
        make_tasks(run, 3, partition=f"p{run.pk}", host=f"r{run.pk}.test")
    first = leases.claim("w1", 6)
    assert {c.run_id for c in first} == {r.pk for r in runs}
    # w1's leases expire and w2 takes them over: the claim writes w1's lost_lease attempts.
    Task.objects.filter(lease_owner="w1").update(next_attempt_at=timezone.now() - timedelta(1))
    taken = leases.claim("w2", 6)
    assert len(taken) == 1  # a taken-over page is claimed alone (a suspect)
    # w1's commit now loses that task, and commits the others.
    outcomes = [
        Outcome(
            http_status=200,
            observations=[Observed(f"{c.url}#o", {"title": "Item", "price": "1", "sku": c.url})],
            discovered=[Discovered(f"{c.url}/child", "product")],
        )
        if i % 2 == 0
        else Outcome(http_status=503, error_class=ErrorClass.SERVER, error_detail="busy")
        for i, c in enumerate(first)
    ]
    summary = leases.commit_outcomes("w1", first, outcomes)
    assert len(summary.lost) == 1
    leases.commit_outcomes("w2", taken, [Outcome(http_status=200)])
    observed = [c for c, o in zip(first, outcomes, strict=True) if o.observations]
    return runs, len([c for c in observed if c.task_id not in summary.lost])


def test_every_run_copy_the_engine_writes_is_its_tasks_run():
    runs, observed = _work(make_dataset())
    attempts = Attempt.objects.filter(run__in=runs)
    assert {a.outcome for a in attempts} >= {"committed", "lost_lease"}
    assert all(a.run_id == a.task.run_id for a in attempts.select_related("task"))
    observations = Observation.objects.filter(run__in=runs).select_related("source_task")
    assert observations.count() == observed > 0
    assert all(o.run_id == o.source_task.run_id for o in observations)
    assert all(o.source_attempt.run_id == o.run_id for o in observations)
    # Each counter row counts moves of its own run's tasks: per run, the deltas sum to the
    # run's tasks by state.
    for run in runs:
        counted: dict[tuple[str, str], int] = {}
        for d in TaskCountDelta.objects.filter(run=run):
            counted[(d.partition, d.state)] = counted.get((d.partition, d.state), 0) + d.delta
        actual: dict[tuple[str, str], int] = {}
        for t in Task.objects.filter(run=run):
            actual[(t.partition, t.state)] = actual.get((t.partition, t.state), 0) + 1
        assert {k: n for k, n in counted.items() if n} == actual


def test_deleting_a_run_with_the_orm_still_takes_its_attempts_and_counters_along():
    (kept, gone), _observed = _work(make_dataset())
    models = (Attempt, Observation, TaskCountDelta)
    before = {model: model.objects.filter(run=kept).count() for model in models}
    assert all(before.values())
    # As before the constraint went: a run whose tasks have observations is protected by
    # Observation.source_task, and the refused delete removes nothing.
    gone_rows = {model: model.objects.filter(run_id=gone.pk).count() for model in models}
    with pytest.raises(ProtectedError):
        gone.delete()
    assert {model: model.objects.filter(run_id=gone.pk).count() for model in models} == gone_rows
    Observation.objects.filter(run=gone).delete()
    gone.delete()
    for model in models:
        assert not model.objects.filter(run_id=gone.pk).exists(), model.__name__
        assert model.objects.filter(run=kept).count() == before[model], model.__name__


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's catalogue")
def test_only_the_task_run_key_is_a_database_constraint_on_the_hot_tables():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND confrelid = 'recovery_run'::regclass"
        )
        referencing = {row[0] for row in cursor.fetchall()}
    assert "recovery_task" in referencing
    assert not referencing & {"recovery_attempt", "recovery_observation", "recovery_taskcountdelta"}
