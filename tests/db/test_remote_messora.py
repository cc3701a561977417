"""Seed 000's API through recovery.remote against the messora simulator on a real socket."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from recovery import leases, remote
from recovery.models import Attempt, Observation, RemoteJob, RemoteJobItem, Run, Task
from recovery.remote import reconcile, steps
from recovery.sandbox import messora as sim
from recovery.states.choices import RemoteJobState
from tests.support.factories import make_run, make_tasks
from tests.support.remote import (
    MESSORA_KEY,
    MESSORA_OTHER_KEY,
    remote_dataset,
    scan_database_for,
    serve,
    stats,
    wait_for,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def messora(settings):
    served, state = serve(sim, polls_to_finish=1)
    settings.MESSORA_API_URL = served.base_url
    settings.MESSORA_API_KEY = MESSORA_KEY
    settings.SALVAGE_BACKOFF_BASE = 0.0
    yield served, state
    served.stop()


def make_messora_run(n: int = 3, **options):
    options.setdefault("poll_interval", 0)
    options.setdefault("request_timeout", 2)
    dataset = remote_dataset("messora", **options)
    run = make_run(dataset)
    tasks = make_tasks(run, n)
    return run, tasks


def drive(worker: str = "w1", rounds: int = 20) -> None:
    """Run the remote steps until no live job is left (bounded)."""
    for _ in range(rounds):
        remote.step(worker)
        live = RemoteJob.objects.filter(state__in=["created", "submitted", "pending"]).exists()
        waiting = Task.objects.filter(state__in=["pending", "retry_wait"]).exists()
        if not live and not waiting:
            return
    raise AssertionError("jobs still live after the bounded number of rounds")


def test_it_submits_polls_and_imports_a_batch(messora):
    served, _state = messora
    run, _tasks = make_messora_run(3)
    drive()
    job = RemoteJob.objects.get()
    assert job.state == RemoteJobState.COMPLETED
    assert job.provider_job_id and job.kind == "batch"
    assert job.credits_used == 3
    assert stats(served)["created"] == 1
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert Observation.objects.filter(run=run).count() == 3
    assert RemoteJobItem.objects.filter(job=job).count() == 3
    # The job's own attempt is its submission; each task's execution is one attempt of its
    # own (3 tasks: 3 committed attempts, not 4).
    assert Attempt.objects.get(pk=job.attempt_id).outcome == "submitted"
    assert Attempt.objects.filter(run=run, outcome="committed").count() == 3
    for task in Task.objects.filter(run=run):
        assert task.attempts.filter(outcome="committed").count() == 1
    assert remote.credits_by_run(run.pk) == 3
    # The job's lease is released and no task is left held.
    assert not Task.objects.filter(state__in=["leased", "remote"]).exists()
    assert not Task.objects.filter(remote_job__isnull=False).exists()


@pytest.mark.django_db(transaction=True)
def test_it_records_the_job_before_the_create_call(messora, monkeypatch):
    _served, _state = messora
    make_messora_run(2)
    seen = {}

    async def spy(self, tasks, run_id):
        # At the moment of the call, the job and its attempt are already committed rows.
        job = await _sync_read()
        seen.update(job)
        raise remote.SubmitRejected(remote.ErrorClass.NETWORK, "stop here")

    from asgiref.sync import sync_to_async

    @sync_to_async
    def _sync_read():
        from django.db import connection

        try:
            job = RemoteJob.objects.get()
            return {"state": job.state, "attempt": Attempt.objects.get(pk=job.attempt_id).outcome}
        finally:
            connection.close()  # this thread's own connection: proof the rows were committed

    monkeypatch.setattr("recovery.providers.messora.MessoraProvider.submit", spy)
    remote.submit_step("w1")
    assert seen == {"state": "created", "attempt": "running"}
    assert RemoteJob.objects.get().state == "failed"
    assert set(Task.objects.values_list("state", flat=True)) == {"retry_wait"}


@pytest.mark.parametrize("fault", ["create_drop", "create_slow"])
def test_an_ambiguous_create_goes_to_reconcile_and_is_never_resubmitted(messora, fault):
    served, state = messora
    state.faults[fault] = 1
    state.slow_seconds = 4
    _run, _tasks = make_messora_run(2, request_timeout=1)
    for _ in range(5):
        remote.step("w1")
    job = RemoteJob.objects.get()
    assert job.state == RemoteJobState.UNKNOWN
    assert job.provider_job_id is None
    assert Attempt.objects.get(pk=job.attempt_id).outcome == "unknown"
    # The simulator did create a job; we did not create a second one.
    assert stats(served)["created"] == 1
    assert RemoteJob.objects.count() == 1
    # The tasks stay held by the job (not claimable, no lease) until an operator decides.
    assert set(Task.objects.values_list("state", "remote_job", "lease_owner", "lease_until")) == {
        ("remote", job.pk, "", None)
    }
    assert leases.claim("w2", 10) == []
    assert list(remote.reconcile_queue()) == [job]


def test_an_operator_attaches_the_found_job_id_and_polling_resumes(messora):
    served, state = messora
    state.faults["create_drop"] = 1
    run, _tasks = make_messora_run(2, request_timeout=1)
    remote.step("w1")
    job = RemoteJob.objects.get()
    assert job.state == "unknown"
    found = next(iter(stats(served)["jobs"]))  # the operator found it in the provider's console
    reconcile.attach_job_id(job.pk, found, actor="alice", reason="found in the console")
    drive()
    job.refresh_from_db()
    assert job.state == "completed" and job.provider_job_id == found
    assert Observation.objects.filter(run=run).count() == 2
    assert stats(served)["created"] == 1


def test_an_operator_replacement_creates_a_linked_attempt_and_keeps_the_original(messora):
    served, state = messora
    state.faults["create_drop"] = 1
    run, _tasks = make_messora_run(2, request_timeout=1)
    remote.step("w1")
    original = RemoteJob.objects.get()
    replacement = reconcile.replace_attempt(original.pk, actor="alice", reason="nothing found")
    drive()
    original.refresh_from_db()
    replacement.refresh_from_db()
    assert original.state == "replaced"
    assert replacement.replaces_id == original.pk
    assert replacement.attempt.replaces_id == original.attempt_id
    assert replacement.state == "completed"
    assert stats(served)["created"] == 2  # exactly one deliberate, operator-approved resubmission
    assert Observation.objects.filter(run=run).count() == 2


def test_dismiss_ends_the_tasks_and_records_who_and_why(messora):
    _served, state = messora
    state.faults["create_drop"] = 1
    make_messora_run(2, request_timeout=1)
    remote.step("w1")
    job = RemoteJob.objects.get()
    reconcile.dismiss(job.pk, actor="bob", reason="duplicate of a manual run")
    job.refresh_from_db()
    assert job.state == "dismissed" and job.resolved_by == "bob"
    assert set(Task.objects.values_list("state", flat=True)) == {"dead"}
    from recovery.models import AuditEntry

    assert AuditEntry.objects.filter(action="remote_dismiss", object_id=str(job.pk)).exists()


def test_a_second_different_job_id_is_rejected(messora):
    _served, _state = messora
    make_messora_run(1)
    drive()
    job = RemoteJob.objects.get()
    with pytest.raises(ValueError):
        reconcile.attach_job_id(job.pk, "job-other", actor="alice", reason="typo")
    job.refresh_from_db()
    assert job.state == "completed"


def test_a_404_marks_lookup_failed_and_polling_stops(messora):
    served, state = messora
    _run, _tasks = make_messora_run(1)
    remote.submit_step("w1")
    state.faults["status_404"] = 1
    remote.poll_step("w1")
    job = RemoteJob.objects.get()
    assert job.state == RemoteJobState.LOOKUP_FAILED
    calls = stats(served)["status_calls"]
    for _ in range(3):
        assert remote.poll_step("w1") is False
    assert stats(served)["status_calls"] == calls


def test_another_tenants_job_id_is_a_lookup_failure(messora):
    served, state = messora
    import httpx

    foreign = httpx.post(
        f"{served.base_url}/batch",
        json={"urls": ["http://x.test/1"]},
        headers={"X-API-Key": MESSORA_OTHER_KEY},
    ).json()["job_id"]
    state.faults["create_drop"] = 1
    make_messora_run(1, request_timeout=1)
    remote.step("w1")
    job = RemoteJob.objects.get()
    reconcile.attach_job_id(job.pk, foreign, actor="alice", reason="wrong guess")
    remote.poll_step("w1")
    job.refresh_from_db()
    assert job.state == RemoteJobState.LOOKUP_FAILED


def test_failed_status_checks_are_retried_within_a_budget_not_job_failures(messora, settings):
    _served, state = messora
    settings.SALVAGE_REMOTE_POLL_FAILURES = 3
    make_messora_run(1)
    remote.submit_step("w1")
    state.faults["status_5xx"] = 2
    for _ in range(2):
        RemoteJob.objects.update(next_poll_at=timezone.now())
        remote.poll_step("w1")
    job = RemoteJob.objects.get()
    assert job.state == "pending" and job.poll_failures == 2
    RemoteJob.objects.update(next_poll_at=timezone.now())
    drive()
    job.refresh_from_db()
    assert job.state == "completed" and job.poll_failures == 0
    # Past the budget, the job goes to the operator instead of polling forever.
    make_messora_run(1)
    remote.submit_step("w1")
    state.faults["status_5xx"] = -1
    for _ in range(5):
        RemoteJob.objects.filter(state="pending").update(next_poll_at=timezone.now())
        RemoteJob.objects.filter(state="submitted").update(next_poll_at=timezone.now())
        remote.poll_step("w1")
    assert RemoteJob.objects.filter(state="lookup_failed").count() == 1


@pytest.mark.parametrize("first_form", ["seconds", "date"])
def test_429_on_a_status_check_honours_retry_after(messora, first_form):
    _served, state = messora
    state.next_retry_after = first_form  # the simulator alternates the two forms
    make_messora_run(1)
    remote.submit_step("w1")
    state.faults["status_429"] = 1
    before = timezone.now()
    remote.poll_step("w1")
    job = RemoteJob.objects.get()
    assert job.poll_failures == 0  # rate limiting is not a failed check
    wait = (job.next_poll_at - before).total_seconds()
    if first_form == "seconds":
        assert 0.9 <= wait <= 10  # Retry-After: 1
    else:
        assert 1.9 <= wait <= 10  # an HTTP-date 3 s ahead (whole seconds)


def test_a_job_pending_past_its_deadline_goes_to_the_operator(messora):
    served, state = messora
    state.faults["hold"] = 1
    make_messora_run(1, poll_timeout=0)
    remote.submit_step("w1")
    remote.poll_step("w1")
    job = RemoteJob.objects.get()
    assert job.state == RemoteJobState.LOOKUP_FAILED
    assert "deadline" in job.last_response["error"]
    assert stats(served)["created"] == 1


def test_partial_success_resubmits_only_the_retriable_items(messora):
    served, state = messora
    state.faults["partial"] = 1  # success, timeout, blocked_antibot, extraction_failed
    run, tasks = make_messora_run(4)
    drive()
    first, second = RemoteJob.objects.order_by("pk")
    assert first.state == second.state == "completed"
    statuses = dict(RemoteJobItem.objects.filter(job=first).values_list("status", "retried_in"))
    assert statuses == {
        "success": None,
        "timeout": second.pk,
        "blocked_antibot": None,
        "extraction_failed": None,
    }
    # The new job carried only the timed-out URL, under a new attempt.
    assert [t["id"] for t in second.input_ref["tasks"]] == [tasks[1].pk]
    assert second.attempt_id != first.attempt_id
    by_task = {t.pk: t for t in Task.objects.all()}
    assert by_task[tasks[0].pk].state == "committed"
    assert by_task[tasks[1].pk].state == "committed"
    assert by_task[tasks[2].pk].state == "quarantined"
    assert by_task[tasks[2].pk].last_error_class == "challenge_page"
    assert by_task[tasks[3].pk].last_error_class == "selector_failure"
    assert stats(served)["created"] == 2
    assert remote.credits_by_run(run.pk) == 5


def test_importing_twice_commits_each_item_once(messora):
    _served, _state = messora
    run, _tasks = make_messora_run(3)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    [(_pk, token)] = remote.claim_due_polls("w1")
    provider = remote.provider_for(run.dataset)
    import asyncio

    async def twice():
        try:
            await provider.status(job.provider_job_id)  # PENDING
            return await provider.status(job.provider_job_id)
        finally:
            await provider.aclose()

    status = asyncio.run(twice())
    assert remote.import_results(job, token, status) is True
    # A second worker saw the same SUCCESS: its stale lease writes nothing.
    assert remote.import_results(job, token, status) is False
    assert Observation.objects.count() == 3 and RemoteJobItem.objects.count() == 3


def test_a_stale_poller_cannot_commit(messora):
    _served, _state = messora
    make_messora_run(1)
    remote.submit_step("w1")
    [(_pk, old_token)] = remote.claim_due_polls("w1")
    assert remote.claim_due_polls("w2") == []  # held: two workers never poll one job
    # w1 stalls; its lease expires and w2 takes the job over.
    RemoteJob.objects.update(lease_until=timezone.now())
    [(_pk2, new_token)] = remote.claim_due_polls("w2")
    assert new_token == old_token + 1
    job = RemoteJob.objects.get()
    stale = remote.JobStatus(remote.Poll.NOT_FOUND)
    assert remote.record_poll(job, old_token, stale, remote.provider_for(job.run.dataset)) is False
    job.refresh_from_db()
    assert job.state == "submitted" and job.lease_owner == "w2"


def test_search_token_cap_is_kept_and_marks_coverage_incomplete(messora):
    _served, state = messora
    state.faults["token_cap"] = 1
    run, _tasks = make_messora_run(1, kind="search", search_limit=6)
    drive()
    job = RemoteJob.objects.get()
    assert job.state == "completed" and job.stopped_reason == "token_cap"
    assert Observation.objects.filter(run=run).count() == 3
    run = Run.objects.get(pk=run.pk)
    assert "token_cap" in run.coverage_note and "incomplete" in run.coverage_note


def test_crawl_results_become_observations_of_the_start_task(messora):
    _served, _state = messora
    run, tasks = make_messora_run(1, kind="crawl", crawl_limit=4)
    drive()
    assert Observation.objects.filter(run=run, source_task=tasks[0]).count() == 4
    assert Task.objects.get().state == "committed"


def test_a_provider_failure_releases_the_tasks_for_a_new_attempt(messora):
    served, state = messora
    state.faults["hold"] = 1
    make_messora_run(2)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    import httpx

    httpx.post(f"{served.base_url}/_sim/finish", json={"job_id": job.provider_job_id})
    remote.poll_step("w1")
    job.refresh_from_db()
    assert job.state == "failed"
    assert set(Task.objects.values_list("state", flat=True)) == {"retry_wait"}


def test_the_api_key_never_reaches_the_database_or_the_logs(messora, caplog):
    _served, state = messora
    caplog.set_level(logging.DEBUG)
    state.faults.update({"create_drop": 1, "status_5xx": 1, "partial": 1})
    make_messora_run(4, request_timeout=1)
    for _ in range(6):
        remote.step("w1")
        RemoteJob.objects.filter(state="pending").update(next_poll_at=timezone.now())
    assert RemoteJob.objects.filter(state="unknown").exists()
    make_messora_run(2)
    drive()
    assert scan_database_for([MESSORA_KEY]) == []
    assert not [r for r in caplog.records if MESSORA_KEY in r.getMessage()]
    assert caplog.records  # the scan read real log lines


def test_the_dispatcher_wakes_a_cluster_worker_for_due_remote_jobs(messora):
    from django_q.models import OrmQ

    from recovery import dispatch, tasks

    make_messora_run(2)
    remote.submit_step("w1")  # submitted; its first poll is due now
    assert remote.has_due_work()
    steps._last_wake["at"] = 0.0
    dispatch.tick()
    funcs = [q.task["func"] for q in OrmQ.objects.all()]
    assert "recovery.tasks.poll_remote_jobs" in funcs
    for _ in range(5):
        tasks.poll_remote_jobs()  # what the cluster worker runs
    assert RemoteJob.objects.get().state == "completed"
    assert not remote.has_due_work()


@pytest.mark.parametrize("first_form", ["seconds", "date"])
def test_a_429_on_create_is_a_certain_refusal_that_waits_for_retry_after(messora, first_form):
    served, state = messora
    state.next_retry_after = first_form
    state.faults["create_429"] = 1
    make_messora_run(2)
    before = timezone.now()
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    assert job.state == "failed"  # not unknown: a 429 created nothing
    assert Attempt.objects.get(pk=job.attempt_id).error_class == "rate_limited"
    assert stats(served)["created"] == 0
    waits = [(t.next_attempt_at - before).total_seconds() for t in Task.objects.all()]
    assert {t.state for t in Task.objects.all()} == {"retry_wait"}
    if first_form == "seconds":
        assert all(0.9 <= w <= 10 for w in waits)  # Retry-After: 1
    else:
        assert all(1.9 <= w <= 10 for w in waits)  # an HTTP-date 3 s ahead

    def finished():
        remote.step("w1")
        return set(Task.objects.values_list("state", flat=True)) == {"committed"}

    wait_for(finished, 15, what="the resubmission after Retry-After")
    assert stats(served)["created"] == 1
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
