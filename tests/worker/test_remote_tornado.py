"""Real `manage.py work` processes SIGKILLed around a Tornado media job."""

from __future__ import annotations

import signal

import httpx
import pytest

from recovery import remote
from recovery.models import Observation, OutboxEvent, RemoteJob, Task
from recovery.remote import reconcile
from recovery.sandbox import tornado as sim
from tests.support.factories import make_run, make_tasks
from tests.support.remote import (
    PROCESS_DEADLINE,
    remote_dataset,
    scan_database_for,
    simulator_fixture,
    wait_for,
)

KEY = "sandbox-tornado-key"

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

media = simulator_fixture(
    sim, url="TORNADO_API_URL", secrets={"TORNADO_API_KEY": KEY}, polls_to_finish=1
)


@pytest.fixture
def media_env(media, tmp_path):
    """The simulator's environment, plus where the children deliver the media hand-off."""

    def env(**extra: str) -> dict[str, str]:
        return media.env(SALVAGE_DESTINATION=f"file://{tmp_path / 'consumer'}", **extra)

    return env


def test_a_worker_killed_after_the_create_call_leaves_an_unknown_job(
    media, media_env, remote_workers
):
    run = make_run(remote_dataset("tornado", poll_interval=0.2))
    make_tasks(run, 1)
    a = remote_workers.start("wa", media_env(SALVAGE_FAULT_POINT="after_submit_before_save"))
    assert a.wait(timeout=60) == -signal.SIGKILL
    assert media.stats()["created"] == 1
    with remote_workers.running("wb", media_env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "unknown", PROCESS_DEADLINE, what="unknown"
        )
    for _ in range(3):
        remote.worker_step("check")
    assert media.stats()["created"] == 1 and RemoteJob.objects.count() == 1
    job = RemoteJob.objects.get()
    found = next(iter(media.stats()["jobs"]))
    reconcile.attach_job_id(job.pk, found, actor="alice", reason="found in the media console")
    with remote_workers.running("wc", media_env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert Task.objects.get().state == "committed"
    assert media.stats()["created"] == 1 and media.stats()["generations"] == 1
    assert KEY not in remote_workers.log_text()
    assert scan_database_for([KEY]) == []


def test_a_worker_killed_while_polling_is_resumed_without_a_second_job(
    media, media_env, remote_workers
):
    media.state.faults["hold"] = 1
    run = make_run(remote_dataset("tornado", poll_interval=0.2))
    make_tasks(run, 1)
    a = remote_workers.start("wa", media_env())
    try:
        wait_for(
            lambda: any(j["polls"] >= 2 for j in media.stats()["jobs"].values()),
            PROCESS_DEADLINE,
            what="A polling",
        )
    finally:
        a.kill()
        a.wait(timeout=10)
    with remote_workers.running("wb", media_env()):
        httpx.post(f"{media.served.base_url}/_sim/release", timeout=5)
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert media.stats()["created"] == 1 and media.stats()["generations"] == 1
    assert Observation.objects.filter(run=run).count() == 1
    assert OutboxEvent.objects.filter(event_type="media_handoff").count() == 1
