"""Two real `manage.py dispatch` processes, SIGKILLed at random while windows come due, create
each window's run exactly once, each whole (recovery.intake.schedules)."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from recovery.intake import recurrence, schedules
from recovery.models import AuditEntry, Run, Schedule, Task
from tests.support.engine_procs import Procs, wait_for
from tests.support.factories import make_dataset

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LINES = 2000  # a manifest big enough that a kill can land while its run is being written


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_two_dispatchers_killed_at_random_make_each_window_once(procs, tmp_path):
    manifest = tmp_path / "m.csv"
    rows = "".join(f"https://shop.test/p/{i},product\n" for i in range(LINES))
    manifest.write_text("url,page_type\n" + rows)
    dataset = make_dataset()
    # Every minute, created 40 minutes ago: 40 windows are due at once, and more come due
    # (one a minute) while the dispatchers run; each missed window is to be made.
    schedule = schedules.add(
        dataset.name,
        "minutely",
        recurrence=schedules.parse_recurrence(cron="* * * * *"),
        tz="Europe/London",
        # %Z: a minute of the fall-back hour happens twice in London (docs/spec-format.md).
        window_format="%Y-%m-%dT%H%M%Z",
        source=str(manifest),
        catch_up="each:366",
        actor="test",
    )
    Schedule.objects.filter(pk=schedule.pk).update(
        created_at=timezone.now() - timedelta(minutes=40)
    )
    env = {"SALVAGE_SCHEDULE_CHECK_SECONDS": "0.05", "SALVAGE_DISPATCH_TICK": "0.05"}
    rng = random.Random(20261201)
    names = ("a", "b")
    live = {n: procs.manage(f"dispatch-{n}-0", "dispatch", **env) for n in names}
    kills = 0
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline and (kills < 8 or Run.objects.count() < 40):
        time.sleep(rng.uniform(0.2, 1.2))
        victim = rng.choice(names)
        procs.stop(live[victim], sig=9, grace=5)
        kills += 1
        live[victim] = procs.manage(f"dispatch-{victim}-{kills}", "dispatch", **env)
    assert kills >= 8
    # Let the survivors finish what is due, then stop them.
    wait_for(
        lambda: (
            Schedule.objects.get(pk=schedule.pk).last_due_at
            >= timezone.now().replace(second=0, microsecond=0)
        ),
        timeout=60,
        what="the dispatchers to catch up",
    )
    for proc in live.values():
        procs.stop(proc, sig=9, grace=5)

    schedule.refresh_from_db()
    runs = Run.objects.filter(dataset=dataset)
    windows = sorted(runs.values_list("window", flat=True))
    assert len(windows) >= 40
    # Each window once (the fence), each minute from the first to the last one (none skipped).
    instant = recurrence.occurrences(
        schedule, schedule.created_at, schedule.last_due_at + timedelta(seconds=1)
    )
    expected = sorted(recurrence.window_for(schedule, i) for i in instant)
    assert windows == expected
    assert schedule.last_window == windows[-1]
    # Each whole: every run has the full manifest and one creation entry in the audit log.
    per_run = Task.objects.filter(run__dataset=dataset).values("run").annotate(n=Count("id"))
    assert {row["n"] for row in per_run} == {LINES}
    assert len(per_run) == len(windows)
    created = AuditEntry.objects.filter(action="run_created", object_type="run")
    assert created.filter(
        object_id__in=[str(p) for p in runs.values_list("pk", flat=True)]
    ).count() == len(windows)
