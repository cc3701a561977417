"""Real `manage.py work` processes, SIGKILLed around the messora create call and while polling."""

from __future__ import annotations

import signal

import httpx
import pytest
from django.utils import timezone

from recovery import leases, remote
from recovery.models import Attempt, Observation, RemoteJob, RemoteJobItem, Task
from recovery.remote import reconcile
from recovery.sandbox import messora as sim
from tests.support.factories import make_run, make_tasks
from tests.support.remote import (
    MESSORA_KEY,
    PROCESS_DEADLINE,
    remote_dataset,
    scan_database_for,
    simulator_fixture,
    wait_for,
)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

messora = simulator_fixture(
    sim, url="MESSORA_API_URL", secrets={"MESSORA_API_KEY": MESSORA_KEY}, polls_to_finish=1
)


def test_a_worker_killed_after_the_create_call_leaves_an_unknown_job_not_a_duplicate(
    messora, remote_workers
):
    dataset = remote_dataset("messora", poll_interval=0.2, request_timeout=5)
    run = make_run(dataset)
    make_tasks(run, 3)

    a = remote_workers.start("wa", messora.env(SALVAGE_FAULT_POINT="after_submit_before_save"))
    assert a.wait(timeout=60) == -signal.SIGKILL
    job = RemoteJob.objects.get()
    assert job.state == "created" and job.provider_job_id is None
    assert messora.stats()["created"] == 1  # the provider did accept it

    with remote_workers.running("wb", messora.env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "unknown",
            PROCESS_DEADLINE,
            what="reap to unknown",
        )
    # Nothing is resubmitted automatically, however many steps run afterwards.
    for _ in range(3):
        remote.worker_step("check")
    assert messora.stats()["created"] == 1
    assert RemoteJob.objects.count() == 1
    job = RemoteJob.objects.get()
    assert set(Task.objects.values_list("state", "remote_job", "lease_owner")) == {
        ("remote", job.pk, "")
    }

    # The operator finds the job in the provider's console and attaches it.
    found = next(iter(messora.stats()["jobs"]))
    reconcile.attach_job_id(job.pk, found, actor="alice", reason="found by custom search")
    with remote_workers.running("wc", messora.env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert Observation.objects.filter(run=run).count() == 3
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert messora.stats()["created"] == 1
    assert MESSORA_KEY not in remote_workers.log_text()
    assert scan_database_for([MESSORA_KEY]) == []


def test_a_worker_killed_while_polling_is_resumed_by_another_without_a_second_job(
    messora, remote_workers
):
    messora.state.faults["hold"] = 1  # the job stays PENDING until released
    dataset = remote_dataset("messora", poll_interval=0.2, request_timeout=5)
    run = make_run(dataset)
    make_tasks(run, 4)

    a = remote_workers.start("wa", messora.env())
    try:
        wait_for(
            lambda: any(j["polls"] >= 2 for j in messora.stats()["jobs"].values()),
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

    with remote_workers.running("wb", messora.env()):
        polls_before = messora.stats()["jobs"][job.provider_job_id]["polls"]
        wait_for(
            lambda: messora.stats()["jobs"][job.provider_job_id]["polls"] > polls_before + 1,
            PROCESS_DEADLINE,
            what="worker B polling the same job",
        )
        served_release = httpx.post(f"{messora.served.base_url}/_sim/release", timeout=5)
        assert served_release.status_code == 200
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert messora.stats()["created"] == 1
    assert RemoteJob.objects.count() == 1
    assert Observation.objects.filter(run=run).count() == 4
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert MESSORA_KEY not in remote_workers.log_text()


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
    messora, remote_workers, point, skip
):
    dataset = remote_dataset("messora", poll_interval=0.2, request_timeout=5)
    run = make_run(dataset)
    make_tasks(run, 3)
    env = messora.env(SALVAGE_FAULT_POINT=point, SALVAGE_FAULT_SKIP=skip)
    a = remote_workers.start("wa", env)
    assert a.wait(timeout=60) == -signal.SIGKILL
    job = RemoteJob.objects.get()
    assert job.state in ("submitted", "pending")
    assert messora.stats()["jobs"][job.provider_job_id]["status"] == "SUCCESS"
    assert Observation.objects.count() == 0
    assert not Attempt.objects.filter(outcome="committed").exists()
    assert_held_by(job, 3)

    with remote_workers.running("wb", messora.env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert messora.stats()["created"] == 1
    assert Observation.objects.filter(run=run).count() == 3
    assert RemoteJobItem.objects.filter(job=job).count() == 3
    assert Attempt.objects.filter(worker=f"remote:{job.pk}", outcome="committed").count() == 3
    # The submission stays the job's own record, not a fourth execution.
    assert Attempt.objects.get(pk=job.attempt_id).outcome == "submitted"
    assert Attempt.objects.filter(run=run, outcome="committed").count() == 3
    assert not Task.objects.exclude(state="committed").exists()
    assert not Task.objects.filter(remote_job__isnull=False).exists()
