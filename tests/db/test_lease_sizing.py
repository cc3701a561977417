"""Leases from measured task times (seed 002, issue 31 item 3): p50/p95/p99 per dataset and
page type from the attempts' own start and finish times, the lease they imply, and a
lease_seconds = "auto" dataset claimed with it (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from recovery import leases
from recovery.intake import specs
from recovery.leases import sizing
from recovery.models import Attempt, Task
from tests.support.factories import DEFAULT_SPEC, make_dataset, make_run, make_tasks
from tests.support.world import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_refresh():
    # refresh_due refreshes at most once a minute per process: each test starts due.
    sizing.forget()
    yield
    sizing.forget()


def timed_attempts(run, page_type: str, seconds: list[float], outcome="committed") -> None:
    """One committed task per duration, with an Attempt that took that long."""
    tasks = make_tasks(run, len(seconds), page_type=page_type, partition=page_type)
    end = timezone.now() - timedelta(minutes=1)
    Attempt.objects.bulk_create(
        Attempt(
            task=task,
            run=run,
            started_at=end - timedelta(seconds=s),
            finished_at=end,
            outcome=outcome,
        )
        for task, s in zip(tasks, seconds, strict=True)
    )
    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(state="committed")


def lease_left(run) -> list[float]:
    now = timezone.now()
    return [
        (t.lease_until - now).total_seconds() for t in Task.objects.filter(run=run, state="leased")
    ]


def test_it_gives_the_percentiles_and_implied_lease_of_known_durations():
    run = make_run()
    timed_attempts(run, "product", [float(s) for s in range(1, 101)])  # 1 s .. 100 s
    timed_attempts(run, "listing", [200.0] * 10)
    # A takeover's record (started = finished) and a deferral are not executions: not counted.
    timed_attempts(run, "product", [0.0] * 30, outcome="lost_lease")
    timed_attempts(run, "product", [0.0] * 30, outcome="deferred")

    measured = sizing.measure(run.dataset_id)

    by_type = {p.page_type: p for p in measured.page_types}
    assert (by_type["product"].p50, by_type["product"].p95, by_type["product"].p99) == (
        50.0,
        95.0,
        99.0,
    )
    assert by_type["product"].attempts == 100
    assert (by_type["listing"].p50, by_type["listing"].p99) == (200.0, 200.0)
    # All 110: ranks 55, 105 and 109 (nearest rank); 101..110 are the listings' 200 s.
    assert (measured.overall.p50, measured.overall.p95, measured.overall.p99) == (
        55.0,
        200.0,
        200.0,
    )
    assert measured.implied == 600  # p99 x 3


def test_it_bounds_the_implied_lease_and_gives_none_before_enough_attempts():
    assert sizing.implied_lease(1.0, 500) == 30
    assert sizing.implied_lease(5000.0, 500) == 3600
    assert sizing.implied_lease(20.0, 50) == 60
    assert sizing.implied_lease(20.0, 49) is None


def test_it_claims_an_auto_dataset_with_the_implied_lease():
    dataset = make_dataset(lease_auto=True)
    done = make_run(dataset)
    timed_attempts(done, "product", [40.0] * 99 + [70.0])  # p99 40 s: lease 120 s
    run = make_run(dataset)
    make_tasks(run, 3)

    claimed = leases.claim("w1", 10)

    assert {c.lease_seconds for c in claimed} == {120}
    assert all(115 < left <= 120 for left in lease_left(run)), lease_left(run)
    dataset.refresh_from_db()
    assert dataset.lease_auto_seconds == 120


def test_it_keeps_the_default_lease_until_enough_attempts_exist(settings):
    settings.SALVAGE_LEASE_SECONDS = 300
    dataset = make_dataset(lease_auto=True)
    done = make_run(dataset)
    timed_attempts(done, "product", [10.0] * (sizing.MIN_ATTEMPTS - 1))
    run = make_run(dataset)
    make_tasks(run, 2)

    first = leases.claim("w1", 1)
    assert first[0].lease_seconds == 300
    assert all(295 < left <= 300 for left in lease_left(run))

    timed_attempts(done, "product", [10.0])  # the 50th: p99 10 s, lease 30 s (the floor)
    sizing.forget()
    second = leases.claim("w1", 1)
    assert second[0].lease_seconds == 30
    task = Task.objects.get(pk=second[0].task_id)
    assert 25 < (task.lease_until - timezone.now()).total_seconds() <= 30


def test_it_leaves_a_dataset_without_auto_on_its_lease():
    dataset = make_dataset(lease_seconds=77)
    done = make_run(dataset)
    timed_attempts(done, "product", [40.0] * 100)
    run = make_run(dataset)
    make_tasks(run, 1)
    assert leases.claim("w1", 1)[0].lease_seconds == 77
    dataset.refresh_from_db()
    assert dataset.lease_auto_seconds is None


def test_it_shows_the_task_times_in_runstatus(settings):
    settings.SALVAGE_LEASE_SECONDS = 300
    run = make_run(make_dataset(lease_auto=True))
    timed_attempts(run, "product", [float(s) for s in range(1, 101)])

    out = StringIO()
    call_command("runstatus", str(run.pk), "--json", stdout=out)
    times = json.loads(out.getvalue())["task_times"]
    assert times["overall"] == {
        "page_type": "",
        "attempts": 100,
        "p50": 50.0,
        "p95": 95.0,
        "p99": 99.0,
    }
    assert times["implied_lease_seconds"] == 297
    assert (times["lease_seconds"], times["lease_source"]) == (300, "default")  # not refreshed

    sizing.refresh()
    text = StringIO()
    call_command("runstatus", str(run.pk), stdout=text)
    assert "page type product (last 100 attempts): p50 50.0s, p95 95.0s, p99 99.0s" in (
        text.getvalue()
    )
    assert "implied lease 297s (p99 x 3" in text.getvalue()
    assert "lease in force 297s (auto: measured)" in text.getvalue()


def test_it_loads_lease_seconds_auto_from_a_spec():
    spec = specs.validate(dict(DEFAULT_SPEC, name="autolease", lease_seconds="auto"))
    dataset, _ = specs.save_dataset(spec)
    assert (dataset.lease_auto, dataset.lease_seconds) == (True, None)
    with pytest.raises(specs.SpecError):
        specs.validate(dict(DEFAULT_SPEC, name="autolease", lease_seconds="often"))


def test_it_shows_the_task_times_on_the_dataset_page(settings):
    settings.SALVAGE_LEASE_SECONDS = 300
    dataset = make_dataset(name="timed", lease_auto=True)
    run = make_run(dataset)
    timed_attempts(run, "product", [float(s) for s in range(1, 101)])
    sizing.refresh()
    client = Client()
    client.force_login(make_user("olivia", "operator"))

    page = client.get("/datasets/timed/").content.decode()

    times = page[page.index('id="task-times"') : page.index('id="implied-lease"')]
    assert '<td>product</td><td class="num">100</td><td class="num">50.0</td>' in times
    assert '<td class="num">95.0</td><td class="num">99.0</td>' in times
    assert "Implied lease 297 s (p99 \u00d7 3" in page
    assert "lease in force 297 s (auto: measured)" in page
