"""Claim, heartbeat and fenced commit on the real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from recovery import counters, keys, leases
from recovery.models import Attempt, Observation, Run, Task, WorkerHeartbeat
from recovery.outcomes import Discovered, ErrorClass, Observed, Outcome
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db


def ok(entity: str, **payload) -> Outcome:
    return Outcome(http_status=200, observations=[Observed(entity, {"v": 1, **payload})])


def expire(task_ids) -> None:
    """Let leases run out (the database clock judges: move the row's times to the past)."""
    past = timezone.now() - timedelta(seconds=5)
    Task.objects.filter(pk__in=list(task_ids)).update(lease_until=past, next_attempt_at=past)


def test_it_claims_due_tasks_and_sets_the_lease():
    run = make_run()
    make_tasks(run, 3)
    claimed = leases.claim("w1", 10)
    assert len(claimed) == 3
    rows = list(Task.objects.filter(run=run))
    for task in rows:
        assert task.state == "leased"
        assert task.lease_owner == "w1"
        assert task.lease_token == 1
        assert task.attempt_count == 1
        assert task.first_attempt_at is not None
        assert task.lease_until == task.next_attempt_at
        assert task.lease_until > timezone.now() + timedelta(seconds=250)  # default 300 s
    assert {c.previous_state for c in claimed} == {"pending"}
    assert counters.by_state(run.pk) == {"leased": 3}


def test_it_claims_at_most_the_limit_by_priority_then_due_time():
    run = make_run()
    tasks = make_tasks(run, 5)
    Task.objects.filter(pk=tasks[3].pk).update(priority=5)
    Task.objects.filter(pk=tasks[1].pk).update(next_attempt_at=timezone.now() + timedelta(hours=1))
    first = leases.claim("w1", 2)
    assert tasks[3].pk in {c.task_id for c in first}  # the high-priority task goes first
    assert len(first) == 2
    rest = leases.claim("w2", 10)
    assert {c.task_id for c in first} | {c.task_id for c in rest} == {
        t.pk for t in tasks if t.pk != tasks[1].pk
    }


def test_it_uses_the_dataset_lease_length():
    run = make_run(make_dataset(lease_seconds=7))
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    assert c.lease_seconds == 7
    task = Task.objects.get(pk=c.task_id)
    assert task.lease_until < timezone.now() + timedelta(seconds=9)


def test_an_expired_lease_is_claimable_again_with_a_new_token():
    run = make_run()
    make_tasks(run, 1)
    (first,) = leases.claim("w1")
    assert leases.claim("w2") == []  # not expired yet
    expire([first.task_id])
    (second,) = leases.claim("w2")
    assert second.task_id == first.task_id
    assert second.lease_token == first.lease_token + 1
    assert second.attempt_count == 2
    assert second.previous_state == "leased"
    assert counters.by_state(run.pk) == {"leased": 1}  # leased -> leased changes no count


def test_a_commit_writes_state_attempt_and_observation_together():
    run = make_run()
    make_tasks(run, 2)
    claimed = leases.claim("w1")
    summary = leases.commit_outcomes("w1", claimed, [ok(c.url) for c in claimed])
    assert summary.states == {"committed": 2}
    assert summary.lost == []
    assert Task.objects.filter(run=run, state="committed", lease_owner="").count() == 2
    attempts = Attempt.objects.filter(run=run)
    assert attempts.count() == 2
    assert set(attempts.values_list("outcome", flat=True)) == {"committed"}
    assert all(a.worker == "w1" and a.finished_at and a.http_status == 200 for a in attempts)
    obs = Observation.objects.get(entity_key=claimed[0].url)
    assert obs.observation_key == keys.observation_key(run.dataset.name, claimed[0].url, run.window)
    assert obs.payload == {"v": 1}
    assert obs.payload_hash == keys.payload_hash(leases.canonical_json({"v": 1}))
    assert obs.source_task_id == claimed[0].task_id
    assert Attempt.objects.get(pk=obs.source_attempt_id).task_id == claimed[0].task_id
    assert counters.by_state(run.pk) == {"committed": 2}
    beat = WorkerHeartbeat.objects.get(worker="w1")
    assert beat.committed == 2


def test_a_repeated_execution_adds_no_observation():
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    leases.commit_outcomes("w1", [c], [ok("entity-1")])
    before = Observation.objects.get()
    Task.objects.filter(pk=c.task_id).update(state="pending", next_attempt_at=timezone.now())
    (again,) = leases.claim("w2")
    summary = leases.commit_outcomes("w2", [again], [ok("entity-1")])
    assert summary.observations == 0  # same hash: the upsert changed nothing
    after = Observation.objects.get()
    assert after.pk == before.pk
    assert after.source_attempt_id == before.source_attempt_id
    Task.objects.filter(pk=c.task_id).update(state="pending", next_attempt_at=timezone.now())
    (third,) = leases.claim("w3")
    assert leases.commit_outcomes("w3", [third], [ok("entity-1", v=2)]).observations == 1
    assert Observation.objects.get().payload == {"v": 2}
    assert Attempt.objects.count() == 3


def test_a_stale_commit_is_fenced_out_and_recorded_as_lost_lease():
    run = make_run()
    make_tasks(run, 1)
    (old,) = leases.claim("slow")
    expire([old.task_id])
    (new,) = leases.claim("fast")
    assert leases.heartbeat("slow", [old]) == set()
    assert leases.heartbeat("fast", [new]) == {new.task_id}
    stale = leases.commit_outcomes("slow", [old], [ok("from-slow")])
    assert stale.lost == [old.task_id]
    assert stale.states == {}
    task = Task.objects.get(pk=old.task_id)
    assert (task.state, task.lease_owner, task.lease_token) == ("leased", "fast", new.lease_token)
    assert not Observation.objects.exists()
    # Two traces of the slow worker: the takeover noted its lease expired, and its late commit
    # was refused. Both lost_lease, neither wrote anything else.
    details = sorted(Attempt.objects.filter(worker="slow").values_list("outcome", "error_detail"))
    assert [outcome for outcome, _d in details] == ["lost_lease", "lost_lease"]
    assert any(d.startswith("lost lease: token") for _o, d in details)
    assert any("taken over by fast" in d for _o, d in details)
    fresh = leases.commit_outcomes("fast", [new], [ok("from-fast")])
    assert fresh.states == {"committed": 1}
    assert list(Observation.objects.values_list("entity_key", flat=True)) == ["from-fast"]
    assert counters.by_state(run.pk) == {"committed": 1}


def test_it_spells_a_refused_commits_detail_with_the_outcome_it_discarded():
    # (PostgreSQL builds this text in the commit statement, SQLite in Python: one spelling.)
    run = make_run()
    make_tasks(run, 2)
    first, second = leases.claim("slow")
    expire([first.task_id, second.task_id])
    leases.claim("fast")  # (an expired lease is taken alone: twice)
    leases.claim("fast")
    failed = Outcome(http_status=503, error_class=ErrorClass.SERVER, error_detail="boom")
    leases.commit_outcomes("slow", [first, second], [ok("a"), failed])
    details = dict(
        Attempt.objects.filter(worker="slow", finished_at__gt=F("started_at")).values_list(
            "task_id", "error_detail"
        )
    )
    token = first.lease_token
    assert details[first.task_id] == (
        f"lost lease: token {token} is no longer current; outcome committed discarded"
    )
    assert details[second.task_id] == (
        f"lost lease: token {token} is no longer current; outcome retry discarded (boom)"
    )


def test_a_batch_commit_fences_each_task_by_its_own_token():
    run = make_run()
    make_tasks(run, 3)
    claimed = leases.claim("w1")
    expire([claimed[1].task_id])
    (stolen,) = leases.claim("w2")
    assert stolen.task_id == claimed[1].task_id
    summary = leases.commit_outcomes("w1", claimed, [ok(c.url) for c in claimed])
    assert summary.states == {"committed": 2}
    assert summary.lost == [claimed[1].task_id]
    assert Observation.objects.count() == 2
    assert not Observation.objects.filter(entity_key=claimed[1].url).exists()


def test_heartbeat_extends_only_leases_still_held():
    run = make_run(make_dataset(lease_seconds=30))
    make_tasks(run, 2)
    claimed = leases.claim("w1")
    Task.objects.filter(pk=claimed[0].task_id).update(lease_until=timezone.now())
    held = leases.heartbeat("w1", claimed)
    assert held == {c.task_id for c in claimed}
    task = Task.objects.get(pk=claimed[0].task_id)
    assert task.lease_until > timezone.now() + timedelta(seconds=25)
    assert task.next_attempt_at == task.lease_until
    assert leases.heartbeat("intruder", claimed) == set()


def test_a_retry_waits_with_backoff_and_keeps_the_error_class():
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    before = timezone.now()
    outcome = Outcome(http_status=503, error_class=ErrorClass.SERVER, error_detail="503")
    summary = leases.commit_outcomes("w1", [c], [outcome], rng=random.Random(1))
    assert summary.states == {"retry_wait": 1}
    task = Task.objects.get(pk=c.task_id)
    assert task.state == "retry_wait"
    assert task.last_error_class == "server_error"
    assert task.last_http_status == 503
    assert task.next_attempt_at >= before - timedelta(seconds=1)
    attempt = Attempt.objects.get()
    assert (attempt.outcome, attempt.error_class) == ("retry", "server_error")
    assert counters.by_state(run.pk) == {"retry_wait": 1}


def test_retry_after_sets_the_next_attempt():
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    outcome = Outcome(http_status=429, error_class=ErrorClass.RATE_LIMITED, retry_after=120)
    leases.commit_outcomes("w1", [c], [outcome])
    task = Task.objects.get(pk=c.task_id)
    wait = (task.next_attempt_at - timezone.now()).total_seconds()
    assert 100 < wait <= 121
    assert leases.claim("w2") == []


def test_a_retry_is_claimable_when_due():
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    outcome = Outcome(error_class=ErrorClass.NETWORK, retry_after=0)
    leases.commit_outcomes("w1", [c], [outcome])
    (again,) = leases.claim("w1")
    assert again.previous_state == "retry_wait"
    assert again.attempt_count == 2
    assert counters.by_state(run.pk) == {"leased": 1}


def test_the_attempt_budget_sends_a_task_to_dead():
    run = make_run(make_dataset(max_attempts=2))
    make_tasks(run, 1)
    outcome = Outcome(http_status=502, error_class=ErrorClass.SERVER, retry_after=0)
    (c,) = leases.claim("w1")
    assert leases.commit_outcomes("w1", [c], [outcome]).states == {"retry_wait": 1}
    (c,) = leases.claim("w1")
    assert leases.commit_outcomes("w1", [c], [outcome]).states == {"dead": 1}
    task = Task.objects.get(pk=c.task_id)
    assert (task.state, task.last_error_class) == ("dead", "server_error")
    last = Attempt.objects.order_by("-started_at", "-finished_at").first()
    assert last.outcome == "dead"
    assert "budget exhausted" in last.error_detail


def test_the_elapsed_budget_sends_a_task_to_dead():
    run = make_run(make_dataset(max_elapsed_seconds=60))
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    outcome = Outcome(error_class=ErrorClass.RATE_LIMITED, retry_after=600)
    assert leases.commit_outcomes("w1", [c], [outcome]).states == {"dead": 1}


def test_a_quarantine_stores_a_sanitised_artefact():
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    artefact = {
        "status": 403,
        "headers": {"Content-Type": "text/html", "Set-Cookie": "s=1", "Authorization": "x"},
        "body_excerpt": "<h1>Login</h1>" + "x" * 10_000,
    }
    outcome = Outcome(http_status=200, error_class=ErrorClass.LOGIN, artefact=artefact)
    assert leases.commit_outcomes("w1", [c], [outcome]).states == {"quarantined": 1}
    attempt = Attempt.objects.get()
    assert attempt.outcome == "quarantined"
    assert attempt.artefact["headers"] == {"Content-Type": "text/html"}
    assert len(attempt.artefact["body_excerpt"]) <= 2000
    assert not Observation.objects.exists()
    assert Task.objects.get().state == "quarantined"


def test_not_found_is_gone():
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    outcome = Outcome(http_status=410, error_class=ErrorClass.NOT_FOUND)
    assert leases.commit_outcomes("w1", [c], [outcome]).states == {"gone": 1}


def test_discovered_urls_become_tasks_once():
    run = make_run()
    make_tasks(run, 2)
    claimed = leases.claim("w1")
    children = [
        Discovered(url="http://shop.test/list?page=2&utm_source=x", page_type="listing"),
        Discovered(url="HTTP://SHOP.TEST/list?page=2", page_type="listing"),  # same page
        Discovered(url="http://shop.test/item/0", page_type="product"),  # already a task
        Discovered(url="not a url", page_type="product"),
    ]
    outcomes = [
        Outcome(http_status=200, discovered=children),
        Outcome(http_status=200, discovered=children[:1], observations=[Observed("e", {})]),
    ]
    summary = leases.commit_outcomes("w1", claimed, outcomes)
    assert summary.discovered == 1
    child = Task.objects.get(page_type="listing")
    assert child.url == "http://shop.test/list?page=2"
    assert child.depth == 1
    assert child.parent_id == claimed[0].task_id
    assert child.partition == "p1"
    assert child.discovery == "link"
    assert Run.objects.get(pk=run.pk).task_total == 3
    assert counters.by_state(run.pk) == {"committed": 2, "pending": 1}
    # Cursor pagination: the next cursor is stored with the page that produced it.
    (nxt,) = leases.claim("w1")
    assert nxt.task_id == child.pk
    cursor = Discovered(
        url="http://shop.test/list?page=3",
        page_type="listing",
        discovery="cursor",
        navigation={"cursor": "abc"},
    )
    leases.commit_outcomes("w1", [nxt], [Outcome(http_status=200, discovered=[cursor])])
    grandchild = Task.objects.get(parent_id=child.pk)
    assert (grandchild.navigation, grandchild.depth, grandchild.discovery) == (
        {"cursor": "abc"},
        2,
        "cursor",
    )


def test_a_lost_lease_writes_no_children():
    run = make_run()
    make_tasks(run, 1)
    (old,) = leases.claim("slow")
    expire([old.task_id])
    leases.claim("fast")
    outcome = Outcome(http_status=200, discovered=[Discovered("http://shop.test/x", "product")])
    assert leases.commit_outcomes("slow", [old], [outcome]).discovered == 0
    assert Task.objects.count() == 1
    assert Run.objects.get(pk=run.pk).task_total == 1


def test_the_same_entity_twice_in_one_batch_is_one_observation():
    run = make_run()
    make_tasks(run, 2)
    claimed = leases.claim("w1")
    summary = leases.commit_outcomes("w1", claimed, [ok("same"), ok("same", v=2)])
    assert summary.states == {"committed": 2}
    assert Observation.objects.count() == 1


def test_a_mixed_batch_from_two_datasets_commits_under_each_dataset():
    run_a, run_b = make_run(), make_run()
    make_tasks(run_a, 1)
    make_tasks(run_b, 1, host="other.test")
    claimed = leases.claim("w1")
    assert {c.dataset for c in claimed} == {run_a.dataset.name, run_b.dataset.name}
    leases.commit_outcomes("w1", claimed, [ok("x") for _ in claimed])
    # Same entity key in two datasets: two observations (the key includes the dataset).
    assert Observation.objects.count() == 2


def test_outcomes_must_match_claims():
    run = make_run()
    make_tasks(run, 1)
    claimed = leases.claim("w1")
    with pytest.raises(ValueError):
        leases.commit_outcomes("w1", claimed, [])


EXPECTED_STATE = {
    ErrorClass.NETWORK: "retry_wait",
    ErrorClass.SERVER: "retry_wait",
    ErrorClass.RATE_LIMITED: "retry_wait",
    ErrorClass.UNCERTAIN_WRITE: "retry_wait",  # next attempt looks up by key first
    ErrorClass.ACCESS: "quarantined",
    ErrorClass.AUTH_REFUSED: "retry_wait",  # a 401/403 not yet persistent
    ErrorClass.LOGIN: "quarantined",
    ErrorClass.CHALLENGE: "quarantined",
    ErrorClass.CONSENT: "quarantined",
    ErrorClass.WRONG_TEMPLATE: "quarantined",
    ErrorClass.EMPTY_SHELL: "quarantined",
    ErrorClass.SELECTOR: "quarantined",
    ErrorClass.BLOCKED: "quarantined",
    ErrorClass.TOO_LARGE: "quarantined",
    ErrorClass.REDIRECTS: "quarantined",
    ErrorClass.BAD_ENCODING: "quarantined",
    ErrorClass.CLIENT_ERROR: "quarantined",
    ErrorClass.INTERNAL: "quarantined",
    ErrorClass.ROBOTS_DISALLOWED: "quarantined",  # never fetched: an operator decides
    ErrorClass.WORKER_CRASH_LOOP: "quarantined",  # a poison page: an operator decides
    ErrorClass.SITEMAP_INVALID: "quarantined",  # not a sitemap: nothing from it is added
    ErrorClass.NOT_FOUND: "gone",
    ErrorClass.BUDGET_EXHAUSTED: "dead",
    # Its final verdict only (a robots.txt unreachable past its bound); while within the bound
    # the page is deferred (Outcome.deferred), which never reaches the retry table.
    ErrorClass.ROBOTS_UNREACHABLE: "dead",
}


@pytest.mark.parametrize("error_class", list(ErrorClass))
def test_every_failure_class_lands_in_its_state(error_class):
    assert set(EXPECTED_STATE) == set(ErrorClass)
    run = make_run()
    make_tasks(run, 1)
    (c,) = leases.claim("w1")
    outcome = Outcome(http_status=599, error_class=error_class, error_detail="x")
    summary = leases.commit_outcomes("w1", [c], [outcome])
    expected = EXPECTED_STATE[error_class]
    assert summary.states == {expected: 1}
    task = Task.objects.get(pk=c.task_id)
    assert (task.state, task.last_error_class, task.lease_owner) == (expected, error_class, "")
    attempt = Attempt.objects.get(task_id=c.task_id)
    assert attempt.error_class == error_class
    assert attempt.outcome == {"retry_wait": "retry"}.get(expected, expected)
    assert not Observation.objects.exists()
    assert counters.by_state(run.pk) == {expected: 1}


def test_a_taken_over_lease_leaves_a_traceable_attempt_for_the_dead_holder():
    run = make_run()
    make_tasks(run, 1)
    (old,) = leases.claim("crashed")
    expire([old.task_id])
    (new,) = leases.claim("rescuer")
    assert new.previous_owner == "crashed"
    attempt = Attempt.objects.get()
    assert (attempt.worker, attempt.outcome, attempt.lease_token) == (
        "crashed",
        "lost_lease",
        old.lease_token,
    )
    assert "taken over by rescuer" in attempt.error_detail
    leases.commit_outcomes("rescuer", [new], [ok("e")])
    assert sorted(Attempt.objects.values_list("outcome", flat=True)) == [
        "committed",
        "lost_lease",
    ]


def test_the_token_fences_a_stale_commit_even_under_the_same_worker_name():
    # A worker restarted with a fixed --worker-id re-claims its own expired task: only the
    # lease token tells the old execution from the new one.
    run = make_run()
    make_tasks(run, 1)
    (old,) = leases.claim("w1")
    expire([old.task_id])
    (new,) = leases.claim("w1")
    assert leases.heartbeat("w1", [old]) == set()
    assert leases.commit_outcomes("w1", [old], [ok("old")]).lost == [old.task_id]
    assert not Observation.objects.exists()
    assert leases.commit_outcomes("w1", [new], [ok("new")]).states == {"committed": 1}
    assert list(Observation.objects.values_list("entity_key", flat=True)) == ["new"]
