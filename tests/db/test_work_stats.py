"""`manage.py work` reports what it did across database outages (the loop restarts)."""

from __future__ import annotations

import io

import pytest
from django.db import OperationalError

from recovery import worker
from tests.factories import make_run, make_tasks

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
    assert (stats.batches, stats.tasks, stats.committed) == (1, 6, 6)


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
        assert "2 committed" in out.getvalue()
        # What was loaded (Django, the providers, the test run's objects) is out of the
        # collector's generations.
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
