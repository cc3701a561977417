"""Real `manage.py work` processes, SIGKILLed around the messora create call and while polling."""

from __future__ import annotations

import signal

import pytest
from django.utils import timezone

from recovery import leases, reconcile, remote
from recovery.models import Attempt, Observation, RemoteJob, RemoteJobItem, Task
from recovery.sandbox import messora as sim
from tests.factories import make_run, make_tasks
from tests.remote_fixtures import (
    MESSORA_KEY,
    PROCESS_DEADLINE,
    remote_dataset,
    scan_database_for,
    serve,
    start_work,
    stats,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def messora(settings):
    served, state = serve(sim, polls_to_finish=1)
    settings.MESSORA_API_URL = served.base_url
    settings.MESSORA_API_KEY = MESSORA_KEY
    yield served, state
    served.stop()


def env_for(served, **extra) -> dict[str, str]:
    return {
        "MESSORA_API_URL": served.base_url,
        "MESSORA_API_KEY": MESSORA_KEY,
        "SALVAGE_REMOTE_LEASE_SECONDS": "2",
        **extra,
    }


def test_a_worker_killed_after_the_create_call_leaves_an_unknown_job_not_a_duplicate(
    messora, tmp_path
):
    served, _state = messora
    dataset = remote_dataset("messora", poll_interval=0.2, request_timeout=5)
    run = make_run(dataset)
    make_tasks(run, 3)
    log = tmp_path / "workers.log"

    a = start_work("wa", env_for(served, SALVAGE_FAULT_POINT="after_submit_before_save"), log)
    assert a.wait(timeout=60) == -signal.SIGKILL
    job = RemoteJob.objects.get()
    assert job.state == "created" and job.provider_job_id is None
    assert stats(served)["created"] == 1  # the provider did accept it

    b = start_work("wb", env_for(served), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.get().state == "unknown",
            PROCESS_DEADLINE,
            what="reap to unknown",
        )
    finally:
        stop_worker(b)
    # Nothing is resubmitted automatically, however many steps run afterwards.
    for _ in range(3):
        remote.worker_step("check")
    assert stats(served)["created"] == 1
    assert RemoteJob.objects.count() == 1
    job = RemoteJob.objects.get()
    assert set(Task.objects.values_list("state", "remote_job", "lease_owner")) == {
        ("remote", job.pk, "")
    }

    # The operator finds the job in the provider's console and attaches it.
    found = next(iter(stats(served)["jobs"]))
    reconcile.attach_job_id(job.pk, found, actor="alice", reason="found by custom search")
    c = start_work("wc", env_for(served), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    finally:
        stop_worker(c)
    assert Observation.objects.filter(run=run).count() == 3
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert stats(served)["created"] == 1
    assert MESSORA_KEY not in log.read_text()
    assert scan_database_for([MESSORA_KEY]) == []


def test_a_worker_killed_while_polling_is_resumed_by_another_without_a_second_job(
    messora, tmp_path
):
    served, state = messora
    state.faults["hold"] = 1  # the job stays PENDING until released
    dataset = remote_dataset("messora", poll_interval=0.2, request_timeout=5)
    run = make_run(dataset)
    make_tasks(run, 4)
    log = tmp_path / "workers.log"

    a = start_work("wa", env_for(served), log)
    try:
        wait_for(
            lambda: any(j["polls"] >= 2 for j in stats(served)["jobs"].values()),
            PROCESS_DEADLINE,
            what="worker A polling",
        )
    finally:
        a.kill()
        a.wait(timeout=10)
    job = RemoteJob.objects.get()
    assert job.state in ("submitted", "pending") and job.provider_job_id
    # The tasks are held by the job, not by the dead worker: no lease to expire, no claim.
    assert_held_by(job, 4)

    b = start_work("wb", env_for(served), log)
    try:
        polls_before = stats(served)["jobs"][job.provider_job_id]["polls"]
        wait_for(
            lambda: stats(served)["jobs"][job.provider_job_id]["polls"] > polls_before + 1,
            PROCESS_DEADLINE,
            what="worker B polling the same job",
        )
        served_release = __import__("httpx").post(f"{served.base_url}/_sim/release", timeout=5)
        assert served_release.status_code == 200
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    finally:
        stop_worker(b)
    assert stats(served)["created"] == 1
    assert RemoteJob.objects.count() == 1
    assert Observation.objects.filter(run=run).count() == 4
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert MESSORA_KEY not in log.read_text()


def assert_held_by(job, n: int) -> None:
    """Every task is `remote`, held by `job`, without a lease, and no claim can take one."""
    assert list(Task.objects.values_list("state", "remote_job", "lease_owner").distinct()) == [
        ("remote", job.pk, "")
    ]
    assert Task.objects.count() == n
    Task.objects.update(next_attempt_at=timezone.now())  # however due they look
    assert leases.claim("test-claimer", 50) == []


# after_poll_before_commit: the SUCCESS answer is in hand, nothing recorded (the first answer,
# PENDING, passes). in_commit: inside the import's transaction, before its COMMIT.
@pytest.mark.parametrize(("point", "skip"), [("after_poll_before_commit", "1"), ("in_commit", "0")])
def test_a_worker_killed_between_success_and_its_commit_is_imported_once(
    messora, tmp_path, point, skip
):
    served, _state = messora
    dataset = remote_dataset("messora", poll_interval=0.2, request_timeout=5)
    run = make_run(dataset)
    make_tasks(run, 3)
    log = tmp_path / "workers.log"
    env = env_for(served, SALVAGE_FAULT_POINT=point, SALVAGE_FAULT_SKIP=skip)
    a = start_work("wa", env, log)
    assert a.wait(timeout=60) == -signal.SIGKILL
    job = RemoteJob.objects.get()
    assert job.state in ("submitted", "pending")
    assert stats(served)["jobs"][job.provider_job_id]["status"] == "SUCCESS"
    assert Observation.objects.count() == 0
    assert not Attempt.objects.filter(outcome="committed").exists()
    assert_held_by(job, 3)

    b = start_work("wb", env_for(served), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    finally:
        stop_worker(b)
    assert stats(served)["created"] == 1
    assert Observation.objects.filter(run=run).count() == 3
    assert RemoteJobItem.objects.filter(job=job).count() == 3
    assert Attempt.objects.filter(worker=f"remote:{job.pk}", outcome="committed").count() == 3
    # The submission stays the job's own record, not a fourth execution.
    assert Attempt.objects.get(pk=job.attempt_id).outcome == "submitted"
    assert Attempt.objects.filter(run=run, outcome="committed").count() == 3
    assert not Task.objects.exclude(state="committed").exists()
    assert not Task.objects.filter(remote_job__isnull=False).exists()
