"""`dispatch --no-wakeups`: beside `work` processes (no qcluster) the dispatcher still makes
scheduled runs, and leaves nothing in django-q2's queue that no cluster would ever read."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import OrmQ

from recovery import dispatch
from recovery.delivery import outbox
from recovery.models import Run, Schedule
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def due_everything(tmp_path, settings):
    """Due tasks, a due outbox event and a due schedule: a normal tick wakes a cluster for
    the first two and makes the scheduled run."""
    settings.SALVAGE_OUTBOX_WAKE = False  # only the tick may enqueue in this test
    # No throttle: each hook looks on this tick, whatever ran before in this process.
    settings.SALVAGE_SCHEDULE_CHECK_SECONDS = 0
    settings.SALVAGE_OUTBOX_SWEEP_SECONDS = 0
    run = make_run()
    make_tasks(run, 120)
    outbox.enqueue(run, "run.accepted", {"run": run.pk})
    manifest = tmp_path / "m.csv"
    manifest.write_text("url,page_type\nhttps://shop.test/p/1,product\n")
    call_command(
        "schedule", "add", run.dataset.name, "daily", "--daily", "00:00", "--tz", "UTC",
        "--manifest", str(manifest), stdout=io.StringIO(),
    )  # fmt: skip
    # Made yesterday: today's window is due.
    Schedule.objects.update(created_at=timezone.now() - timedelta(days=1))
    return run


def test_without_wakeups_it_makes_the_scheduled_run_and_enqueues_nothing(
    due_everything, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = dispatch.tick(wakeups=False)
    assert (result.due, result.sent) == (0, 0)
    assert OrmQ.objects.count() == 0
    assert Run.objects.filter(dataset=due_everything.dataset).count() == 2  # + the schedule's


def test_with_wakeups_the_same_tick_wakes_a_cluster(
    due_everything, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = dispatch.tick()
    # Three claim wake-ups for 120 due tasks, and one to deliver the due event.
    assert result.due == 120 and result.sent >= 4
    assert OrmQ.objects.count() == result.sent
    assert Run.objects.filter(dataset=due_everything.dataset).count() == 2


def test_the_command_takes_the_flag():
    make_tasks(make_run(), 10)
    call_command("dispatch", "--once", "--no-wakeups", stdout=io.StringIO())
    assert OrmQ.objects.count() == 0
    call_command("dispatch", "--once", stdout=io.StringIO())
    assert OrmQ.objects.count() == 1
