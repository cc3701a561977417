"""Real `manage.py work` processes SIGKILLed around a Tornado media job."""

from __future__ import annotations

import signal

import httpx
import pytest

from recovery import reconcile, remote
from recovery.models import Observation, OutboxEvent, RemoteJob, Task
from recovery.sandbox import tornado as sim
from tests.factories import make_run, make_tasks
from tests.remote_fixtures import (
    PROCESS_DEADLINE,
    remote_dataset,
    scan_database_for,
    serve,
    start_work,
    stats,
    stop_worker,
    wait_for,
)

KEY = "sandbox-tornado-key"

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def media(settings, tmp_path):
    served, state = serve(sim, polls_to_finish=1)
    settings.TORNADO_API_URL = served.base_url
    settings.TORNADO_API_KEY = KEY
    yield served, state
    served.stop()


def env_for(served, tmp_path, **extra) -> dict[str, str]:
    return {
        "TORNADO_API_URL": served.base_url,
        "TORNADO_API_KEY": KEY,
        "SALVAGE_REMOTE_LEASE_SECONDS": "2",
        "SALVAGE_DESTINATION": f"file://{tmp_path / 'consumer'}",
        **extra,
    }


def test_a_worker_killed_after_the_create_call_leaves_an_unknown_job(media, tmp_path):
    served, _state = media
    run = make_run(remote_dataset("tornado", poll_interval=0.2))
    make_tasks(run, 1)
    log = tmp_path / "workers.log"
    a = start_work(
        "wa", env_for(served, tmp_path, SALVAGE_FAULT_POINT="after_submit_before_save"), log
    )
    assert a.wait(timeout=60) == -signal.SIGKILL
    assert stats(served)["created"] == 1
    b = start_work("wb", env_for(served, tmp_path), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.get().state == "unknown", PROCESS_DEADLINE, what="unknown"
        )
    finally:
        stop_worker(b)
    for _ in range(3):
        remote.worker_step("check")
    assert stats(served)["created"] == 1 and RemoteJob.objects.count() == 1
    job = RemoteJob.objects.get()
    found = next(iter(stats(served)["jobs"]))
    reconcile.attach_job_id(job.pk, found, actor="alice", reason="found in the media console")
    c = start_work("wc", env_for(served, tmp_path), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    finally:
        stop_worker(c)
    assert Task.objects.get().state == "committed"
    assert stats(served)["created"] == 1 and stats(served)["generations"] == 1
    assert KEY not in log.read_text()
    assert scan_database_for([KEY]) == []


def test_a_worker_killed_while_polling_is_resumed_without_a_second_job(media, tmp_path):
    served, state = media
    state.faults["hold"] = 1
    run = make_run(remote_dataset("tornado", poll_interval=0.2))
    make_tasks(run, 1)
    log = tmp_path / "workers.log"
    a = start_work("wa", env_for(served, tmp_path), log)
    try:
        wait_for(
            lambda: any(j["polls"] >= 2 for j in stats(served)["jobs"].values()),
            PROCESS_DEADLINE,
            what="A polling",
        )
    finally:
        a.kill()
        a.wait(timeout=10)
    b = start_work("wb", env_for(served, tmp_path), log)
    try:
        httpx.post(f"{served.base_url}/_sim/release", timeout=5)
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    finally:
        stop_worker(b)
    assert stats(served)["created"] == 1 and stats(served)["generations"] == 1
    assert Observation.objects.filter(run=run).count() == 1
    assert OutboxEvent.objects.filter(event_type="media_handoff").count() == 1
