"""The dispatcher tick: wake-ups for due work, bounded by those already waiting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from recovery import counters, dispatch, leases
from recovery.models import Task, TaskCountDelta
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def test_it_sends_one_wakeup_per_batch_of_due_tasks():
    run = make_run()
    make_tasks(run, 120)
    result = dispatch.tick(batch_size=50, max_waiting=8)
    assert (result.due, result.waiting, result.sent) == (120, 0, 3)
    assert OrmQ.objects.count() == 3
    # Wake-ups not yet taken count: the next tick sends nothing more.
    assert dispatch.tick(batch_size=50, max_waiting=8).sent == 0
    assert OrmQ.objects.count() == 3


def test_it_never_leaves_more_than_max_waiting():
    run = make_run()
    make_tasks(run, 1000)
    assert dispatch.tick(batch_size=10, max_waiting=4).sent == 4
    assert dispatch.tick(batch_size=10, max_waiting=4).sent == 0


def test_it_sends_nothing_when_nothing_is_due():
    run = make_run()
    make_tasks(run, 5)
    Task.objects.update(next_attempt_at=timezone.now() + timedelta(minutes=5))
    assert not dispatch.tick()
    leases.claim("w1")  # nothing due, nothing claimed
    assert OrmQ.objects.count() == 0


def test_an_expired_lease_is_due_work():
    run = make_run()
    make_tasks(run, 2)
    leases.claim("w1")
    assert dispatch.tick().sent == 0
    past = timezone.now() - timedelta(seconds=1)
    Task.objects.update(lease_until=past, next_attempt_at=past)
    assert dispatch.tick(batch_size=50).sent == 1


def test_it_compacts_busy_runs_counters():
    run = make_run()
    for _ in range(5):
        make_tasks(run, 1)
    assert dispatch.compact_busy_runs(min_rows=3) == 1
    assert TaskCountDelta.objects.filter(run=run).count() == 1
    assert counters.by_state(run.pk) == {"pending": 5}
