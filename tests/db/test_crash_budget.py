"""The crash budget apart from the retry budget (recovery.leases.crashes), on the real
database (SQLite and PostgreSQL): a lease taken over after its worker died is no failure of
the page, a page taken over SALVAGE_CRASH_BUDGET times is quarantined as worker_crash_loop
with its evidence, and a page that may have killed a worker is claimed alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from recovery import counters, leases
from recovery.models import Attempt, Task
from recovery.outcomes import ErrorClass, Observed, Outcome
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db

SERVER_ERROR = Outcome(http_status=502, error_class=ErrorClass.SERVER, retry_after=0)


def ok(entity: str) -> Outcome:
    return Outcome(http_status=200, observations=[Observed(entity, {"v": 1})])


def expire(task_ids) -> None:
    """Let leases run out (the database clock judges: move the row's times to the past)."""
    past = timezone.now() - timedelta(seconds=5)
    Task.objects.filter(pk__in=list(task_ids)).update(lease_until=past, next_attempt_at=past)


def crash(task_id: int, times: int) -> None:
    """`times` workers claim the task and die holding it (their leases run out)."""
    for n in range(times):
        (c,) = leases.claim(f"doomed-{n}", 1)
        assert c.task_id == task_id
        expire([task_id])


def test_lost_leases_do_not_spend_the_retry_budget():
    run = make_run(make_dataset(max_attempts=2))
    (task,) = make_tasks(run, 1)
    crash(task.pk, 3)
    (c,) = leases.claim("w1")
    assert (c.attempt_count, c.crash_count, c.retry_attempts) == (4, 3, 1)
    # Before the crash budget this was "budget exhausted: 4 of 2 attempts" after 3 kills.
    assert leases.commit_outcomes("w1", [c], [SERVER_ERROR]).states == {"retry_wait": 1}
    (c,) = leases.claim("w1")
    assert leases.commit_outcomes("w1", [c], [SERVER_ERROR]).states == {"dead": 1}
    last = Attempt.objects.get(task_id=task.pk, outcome="dead")
    assert last.error_detail.startswith(
        "budget exhausted: 2 of 2 attempts (and 3 lost with a worker, not counted)"
    )


def test_a_page_killed_fewer_times_than_the_crash_budget_still_commits(settings):
    settings.SALVAGE_CRASH_BUDGET = 3
    run = make_run()
    (task,) = make_tasks(run, 1)
    crash(task.pk, 2)
    (c,) = leases.claim("w1")
    assert c.crash_count == 2
    assert leases.commit_outcomes("w1", [c], [ok("e")]).states == {"committed": 1}
    assert Task.objects.get(pk=task.pk).state == "committed"


def test_a_page_at_the_crash_budget_is_quarantined_with_its_evidence(settings):
    settings.SALVAGE_CRASH_BUDGET = 3
    run = make_run()
    poison, other = make_tasks(run, 2)
    Task.objects.filter(pk=poison.pk).update(priority=5)  # claimed first, every time
    crash(poison.pk, 3)
    # The claim that would run it a fourth time quarantines it instead (a suspect is claimed
    # alone: nothing else comes with it), and the next claim hands out the next page.
    assert leases.claim("rescuer", 10) == []
    (c,) = leases.claim("rescuer", 10)
    assert c.task_id == other.pk
    assert leases.commit_outcomes("rescuer", [c], [ok("e")]).states == {"committed": 1}
    task = Task.objects.get(pk=poison.pk)
    assert (task.state, task.last_error_class, task.crash_count, task.lease_owner) == (
        "quarantined",
        "worker_crash_loop",
        3,
        "",
    )
    lost = Attempt.objects.filter(task_id=poison.pk, outcome="lost_lease").order_by("lease_token")
    assert [(a.worker, a.lease_token) for a in lost] == [
        ("doomed-0", 1),
        ("doomed-1", 2),
        ("doomed-2", 3),
    ]
    verdict = Attempt.objects.get(task_id=poison.pk, outcome="quarantined")
    assert (verdict.worker, verdict.error_class) == ("rescuer", "worker_crash_loop")
    assert "3 attempts lost with their worker" in verdict.error_detail
    assert "doomed-0, doomed-1, doomed-2" in verdict.error_detail
    evidence = verdict.artefact["worker_crashes"]
    assert [(e["worker"], e["lease_token"]) for e in evidence] == [
        ("doomed-0", "1"),
        ("doomed-1", "2"),
        ("doomed-2", "3"),
    ]
    assert all(e["taken_over_at"] for e in evidence)
    assert counters.by_state(run.pk) == {"quarantined": 1, "committed": 1}
    assert leases.claim("rescuer") == []  # never handed out again


def test_a_page_that_may_have_killed_its_worker_is_claimed_alone():
    run = make_run()
    make_tasks(run, 6)
    batch = leases.claim("w1", 4)
    assert len(batch) == 4
    expire([c.task_id for c in batch])
    # Four suspects (their worker died): each is claimed alone, so when one of them is a
    # poison page the next crash is its own, not its neighbours'.
    for _ in range(4):
        (c,) = leases.claim("w2", 10)
        assert c.previous_owner == "w1" and c.crash_count == 1
        # A crashed page that then fails normally stays a suspect in retry_wait too.
        assert leases.commit_outcomes("w2", [c], [SERVER_ERROR]).states == {"retry_wait": 1}
    for _ in range(4):
        (c,) = leases.claim("w3", 10)
        assert c.crash_count == 1 and c.previous_owner == ""
        leases.commit_outcomes("w3", [c], [ok(str(c.task_id))])
    # Pages that never crashed a worker are still claimed as a batch.
    assert len(leases.claim("w4", 10)) == 2


def test_a_crash_loop_shows_on_the_pages_and_can_be_rerun(settings):
    from django.test import Client
    from django.urls import reverse

    from recovery.quality import reruns
    from tests.support.acceptance import make_shop
    from tests.support.world import make_users

    settings.SALVAGE_CRASH_BUDGET = 2
    run = make_run(make_shop())
    (task,) = make_tasks(run, 1)
    crash(task.pk, 2)
    assert leases.claim("rescuer") == []
    client = Client()
    client.force_login(make_users()["admin"])
    quarantine = client.get(reverse("dashboard:quarantine", kwargs={"run_id": run.pk}))
    assert quarantine.status_code == 200
    text = quarantine.content.decode()
    assert "worker_crash_loop (1)" in text  # the rerun form's choice
    assert "worker crash loop: 2 attempts lost with their worker" in text  # the sample attempt
    page = client.get(reverse("dashboard:task", kwargs={"task_id": task.pk})).content.decode()
    assert "worker_crash_loop" in page and "doomed-0" in page and "doomed-1" in page
    batch = reruns.create_recovery_batch(
        run.pk,
        error_classes=["worker_crash_loop"],
        reason="the parser no longer crashes on it",
        scraper_version="2",
        actor="admin",
    )
    assert batch.task_count == 1
    reset = Task.objects.get(pk=task.pk)
    assert reset.state == "pending"


def test_a_rerun_of_a_crash_loop_resets_its_crash_budget_and_the_page_is_fetched(settings):
    import io

    from django.core.management import call_command

    from recovery.models import AuditEntry

    settings.SALVAGE_CRASH_BUDGET = 2
    run = make_run()
    poison, other = make_tasks(run, 2)
    crash(poison.pk, 2)
    assert leases.claim("rescuer", 1) == []  # quarantined as worker_crash_loop
    (c,) = leases.claim("rescuer")
    assert c.task_id == other.pk
    leases.commit_outcomes("rescuer", [c], [ok("other")])  # the run's other page: terminal
    call_command(
        "rerun", str(run.pk), "--error-class", "worker_crash_loop", "--reason", "parser fixed",
        "--actor", "admin", stdout=io.StringIO(),
    )  # fmt: skip
    reset = Task.objects.get(pk=poison.pk)
    assert (reset.state, reset.crash_count, reset.attempt_count) == ("pending", 0, 0)
    entry = AuditEntry.objects.get(action="create_recovery_batch")
    assert entry.detail["crash_counts_reset"] == 1 and entry.detail["tasks"] == 1
    # The next claim hands the page out to be fetched (it was quarantined again, unfetched).
    (c,) = leases.claim("after-fix")
    assert (c.task_id, c.crash_count) == (poison.pk, 0)
    assert leases.commit_outcomes("after-fix", [c], [ok("poison")]).states == {"committed": 1}


def test_a_takeover_during_a_database_outage_is_pardoned_when_its_worker_comes_back():
    """The other order: another worker took the lease over (crash_count 1) while its holder
    could not reach the database; the holder, back, withdraws that crash."""
    from datetime import UTC, datetime, timedelta

    from django.utils import timezone

    from recovery.leases import crashes

    run = make_run()
    make_tasks(run, 2)
    noticed_at = datetime.now(UTC)
    held = leases.claim("cut-off", 2)
    past = timezone.now() - timedelta(seconds=5)
    Task.objects.filter(pk=held[0].task_id).update(lease_until=past, next_attempt_at=past)
    (taken,) = leases.claim("other", 1)
    assert (taken.task_id, taken.crash_count) == (held[0].task_id, 1)
    assert crashes.pardon_outage("cut-off", noticed_at) == (1, 1)
    assert Task.objects.get(pk=held[0].task_id).crash_count == 0
    given = Task.objects.get(pk=held[1].task_id)
    assert (given.state, given.lease_owner, given.crash_count) == ("retry_wait", "", 0)
    assert crashes.evidence(held[0].task_id) == []
    (again,) = leases.claim("other", 5)  # claimable at once, and not as a suspect
    assert (again.task_id, again.crash_count) == (held[1].task_id, 0)
    assert crashes.pardon_outage("cut-off", noticed_at) == (0, 0)  # once only
