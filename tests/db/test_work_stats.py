"""`manage.py work` reports what it did: across database outages (the loop restarts), and with
tasks and attempts counted apart (a retried task is claimed and tried more than once)."""

from __future__ import annotations

import io

import pytest
from django.db import OperationalError

from recovery import worker
from recovery.models import Attempt, Task
from recovery.outcomes import ErrorClass, Observed, Outcome
from tests.db.test_worker_steps import factory_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_loop_counts_into_the_callers_stats_before_an_outage_ends_it():
    run = make_run()
    make_tasks(run, 6)
    stats = worker.LoopStats()

    def database_goes_away(worker_id):
        if stats.committed:
            raise OperationalError("the database system is shutting down")
        return False

    with pytest.raises(OperationalError):
        worker.run_forever("w-outage", batch_size=6, extra_steps=(database_goes_away,), stats=stats)
    assert (stats.batches, stats.claims, stats.committed) == (1, 6, 6)


class FailsFirst:
    """Every task's first attempt is a 503 (retried), its second commits."""

    name = "fails_first"

    async def execute_many(self, tasks):
        return [
            Outcome(http_status=503, error_class=ErrorClass.SERVER, error_detail="HTTP 503")
            if t.attempt_count == 1
            else Outcome(http_status=200, observations=[Observed(t.url, {"n": 1})])
            for t in tasks
        ]

    async def aclose(self):
        return None


def test_the_summary_counts_tasks_committed_not_attempts(settings):
    settings.SALVAGE_BACKOFF_BASE = 0.0  # the retry is due at once
    run = make_run(make_dataset(provider="fails_first"))
    make_tasks(run, 3)
    stats = worker.run_until_idle(
        "w-retries", batch_size=3, provider_factory=factory_for({"fails_first": FailsFirst()})
    )
    assert set(Task.objects.filter(run=run).values_list("state", flat=True)) == {"committed"}
    assert Attempt.objects.filter(run=run).count() == 6
    assert (stats.claims, stats.attempts, stats.retried, stats.committed) == (6, 6, 3, 3)
    assert stats.summary() == (
        f"{stats.batches} batches, 6 claims, 6 attempts (3 to retry), 0 lost leases; "
        "tasks ended: 3 committed, 0 quarantined, 0 gone, 0 dead"
    )


def test_the_work_command_freezes_what_it_loaded_before_its_loop():
    import gc

    from django.core.management import call_command

    run = make_run()
    make_tasks(run, 2)
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        out = io.StringIO()
        call_command("work", "--until-idle", "--worker-id", "w-frozen", stdout=out)
        assert (
            out.getvalue()
            .rstrip()
            .endswith("tasks ended: 2 committed, 0 quarantined, 0 gone, 0 dead")
        )
        # What was loaded (Django, the providers, the test run's objects) is out of the
        # collector's generations.
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
