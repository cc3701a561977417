"""A deferral (Outcome.deferred) through the real commit, on SQLite and PostgreSQL: the task
waits in retry_wait, its Attempt says "deferred", and neither budget counts it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from recovery import counters, leases
from recovery.models import Attempt, Task
from recovery.outcomes import ErrorClass, Observed, Outcome
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db


def due_now(task_id: int) -> None:
    past = timezone.now() - timedelta(seconds=1)
    Task.objects.filter(pk=task_id).update(next_attempt_at=past)


def deferred(wait: float = 30.0) -> Outcome:
    return Outcome(
        error_class=ErrorClass.ROBOTS_UNREACHABLE,
        error_detail="deferred: robots.txt unreachable (HTTP 503)",
        retry_after=wait,
        deferred=True,
    )


def test_a_deferral_waits_without_spending_either_budget():
    run = make_run(make_dataset(max_attempts=1, max_elapsed_seconds=60))
    (task,) = make_tasks(run, 1)
    for n in range(1, 4):
        (c,) = leases.claim("w1")
        summary = leases.commit_outcomes("w1", [c], [deferred(30.0)])
        assert summary.states == {"retry_wait": 1}
        row = Task.objects.get(pk=task.pk)
        assert (row.state, row.deferred_count, row.attempt_count) == ("retry_wait", n, n)
        assert row.last_error_class == "robots_unreachable"
        # The wait is the host's, not the retry table's.
        wait = (row.next_attempt_at - timezone.now()).total_seconds()
        assert 25 < wait <= 30
        # No attempt counted yet: the elapsed budget has not started.
        assert row.first_attempt_at is None
        due_now(task.pk)
    attempts = list(Attempt.objects.filter(task=task).values_list("outcome", "error_class"))
    assert attempts == [("deferred", "robots_unreachable")] * 3

    # The one attempt max_attempts allows is still there: a success commits.
    (c,) = leases.claim("w1")
    assert c.retry_attempts == 1
    leases.commit_outcomes("w1", [c], [Outcome(http_status=200, observations=[Observed("e", {})])])
    row = Task.objects.get(pk=task.pk)
    assert (row.state, row.attempt_count, row.deferred_count) == ("committed", 4, 3)
    assert row.first_attempt_at is not None
    assert counters.by_state(run.pk) == {"committed": 1}


def test_after_a_deferral_a_real_failure_still_counts():
    run = make_run(make_dataset(max_attempts=2))
    (task,) = make_tasks(run, 1)
    (c,) = leases.claim("w1")
    leases.commit_outcomes("w1", [c], [Outcome(http_status=503, error_class=ErrorClass.SERVER)])
    first = Task.objects.get(pk=task.pk).first_attempt_at
    assert first is not None
    due_now(task.pk)
    (c,) = leases.claim("w1")
    leases.commit_outcomes("w1", [c], [deferred(0.0)])
    # A counted attempt came first: its time stays the start of the elapsed budget.
    assert Task.objects.get(pk=task.pk).first_attempt_at == first
    due_now(task.pk)
    (c,) = leases.claim("w1")
    assert c.retry_attempts == 2  # three claims, one of them a deferral
    leases.commit_outcomes("w1", [c], [Outcome(http_status=503, error_class=ErrorClass.SERVER)])
    row = Task.objects.get(pk=task.pk)
    assert row.state == "dead"
    assert "2 of 2 attempts" in Attempt.objects.filter(task=task, outcome="dead").get().error_detail


def test_a_politeness_deferral_has_no_error_class():
    run = make_run()
    (task,) = make_tasks(run, 1)
    (c,) = leases.claim("w1")
    outcome = Outcome(error_detail="deferred: next turn in 3.0s", retry_after=3.0, deferred=True)
    leases.commit_outcomes("w1", [c], [outcome])
    row = Task.objects.get(pk=task.pk)
    assert (row.state, row.last_error_class, row.deferred_count) == ("retry_wait", "", 1)
    attempt = Attempt.objects.get(task=task)
    assert (attempt.outcome, attempt.error_class) == ("deferred", "")
