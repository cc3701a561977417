"""Migration 0010: tasks parked under a remote job (`leased` to "remote:<pk>" until year 9000)
become `remote`, held by their job, and the run counters equal a recount afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from recovery import counters, leases
from recovery.models import Attempt, Task
from tests.support.migrations import migrate, migrate_to_latest, old_database_at

BEFORE = [("recovery", "0009_upload_dataset_permission")]
AFTER = [("recovery", "0010_task_remote_state")]
PARKED = datetime(9000, 1, 1, tzinfo=UTC)

pytestmark = pytest.mark.django_db(transaction=True)


old_database = old_database_at(BEFORE)


def test_parked_tasks_of_each_kind_become_remote_and_counters_equal_a_recount(old_database):
    apps = old_database
    Dataset = apps.get_model("recovery", "Dataset")
    Run = apps.get_model("recovery", "Run")
    OldTask = apps.get_model("recovery", "Task")
    OldAttempt = apps.get_model("recovery", "Attempt")
    RemoteJob = apps.get_model("recovery", "RemoteJob")
    TaskCountDelta = apps.get_model("recovery", "TaskCountDelta")

    dataset = Dataset.objects.create(name="shop", spec={}, spec_sha256="0" * 64, provider="messora")
    run = Run.objects.create(dataset=dataset, window="2026-11-30")
    now = timezone.now()
    tasks = {}

    def task(name, state, partition="a", **fields):
        tasks[name] = OldTask.objects.create(
            run=run,
            task_key=name.ljust(64, "0"),
            url=f"http://shop.test/{name}",
            partition=partition,
            state=state,
            next_attempt_at=now,
            **fields,
        )
        return tasks[name]

    jobs = {}
    for kind, partition in [("submitted", "a"), ("unknown", "b"), ("lookup_failed", "b")]:
        first = task(f"{kind}-1", "pending", partition)
        attempt = OldAttempt.objects.create(task=first, run=run, outcome="submitted")
        jobs[kind] = job = RemoteJob.objects.create(
            attempt=attempt, run=run, provider="messora", kind="batch", state=kind
        )
        for name in (f"{kind}-1", f"{kind}-2"):
            if name != f"{kind}-1":
                task(name, "pending", partition)
            OldTask.objects.filter(pk=tasks[name].pk).update(
                state="leased",
                lease_owner=f"remote:{job.pk}",
                lease_token=3,
                lease_until=PARKED,
                next_attempt_at=PARKED,
            )
    # A completed job's submission attempt ended "committed" beside its task's own attempt.
    done = task("done", "committed")
    old_submission = OldAttempt.objects.create(task=done, run=run, outcome="committed")
    RemoteJob.objects.create(
        attempt=old_submission,
        run=run,
        provider="messora",
        kind="batch",
        state="completed",
        provider_job_id="j-9",
    )
    # Untouched: a worker's own lease, a pending task.
    task("worker", "leased", lease_owner="w1", lease_token=5, lease_until=now)
    task("idle", "pending")
    # The counters as the old engine kept them (parked tasks counted as leased), plus drift
    # that a recount must remove.
    for partition, state, n in [
        ("a", "leased", 3),
        ("b", "leased", 4),
        ("a", "committed", 1),
        ("a", "pending", 1),
        ("a", "pending", 7),
    ]:
        TaskCountDelta.objects.create(run=run, partition=partition, state=state, delta=n)

    migrate(AFTER)
    # What follows reads through today's models and claim (a later migration added a Task
    # column, crash_count): bring the schema up to date; 0011 onwards leave these rows alone.
    migrate_to_latest()

    for kind, job in jobs.items():
        held = Task.objects.filter(pk__in=[tasks[f"{kind}-1"].pk, tasks[f"{kind}-2"].pk])
        assert {(t.state, t.remote_job_id, t.lease_owner, t.lease_until) for t in held} == {
            ("remote", job.pk, "", None)
        }
        assert all(t.next_attempt_at.year < 9000 for t in held)
        assert all(t.lease_token == 3 for t in held)  # the import presents it
    assert Task.objects.get(pk=tasks["worker"].pk).lease_owner == "w1"
    assert Task.objects.get(pk=tasks["worker"].pk).state == "leased"
    assert not Task.objects.filter(next_attempt_at__year=9000).exists()
    assert Attempt.objects.get(pk=old_submission.pk).outcome == "submitted"
    migrated = counters.by_partition(run.pk)
    assert migrated == {
        "a": {"remote": 2, "committed": 1, "leased": 1, "pending": 1},
        "b": {"remote": 4},
    }
    counters.rebuild(run.pk)
    assert counters.by_partition(run.pk) == migrated
    # No claim reaches a remote task, however due it looks (the worker's expired lease and
    # the pending task are claimable; the expired lease is claimed alone, recovery.leases.crashes).
    Task.objects.filter(state="remote").update(next_attempt_at=now - timedelta(days=1))
    claimed = [c for _ in range(3) for c in leases.claim("w2", 50)]
    assert sorted(c.task_id for c in claimed) == sorted([tasks["idle"].pk, tasks["worker"].pk])
