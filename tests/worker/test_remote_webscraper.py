"""Real `manage.py work` processes SIGKILLed around a Web Scraper Cloud launch and its sync."""

from __future__ import annotations

import signal

import httpx
import pytest

from recovery import reconcile, remote
from recovery.models import Observation, RemoteJob, Task, WebhookReceipt
from recovery.sandbox import webscraper as sim
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

TOKEN = "sandbox-webscraper-token"
SECRET = "hook-secret-77aa01"

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cloud(settings):
    served, state = serve(sim, run_seconds=0.2)
    settings.WEBSCRAPER_API_URL = served.base_url
    settings.WEBSCRAPER_API_TOKEN = TOKEN
    settings.WEBSCRAPER_WEBHOOK_SECRET = SECRET
    yield served, state
    served.stop()


def env_for(served, **extra) -> dict[str, str]:
    return {
        "WEBSCRAPER_API_URL": served.base_url,
        "WEBSCRAPER_API_TOKEN": TOKEN,
        "WEBSCRAPER_WEBHOOK_SECRET": SECRET,
        "SALVAGE_REMOTE_LEASE_SECONDS": "2",
        **extra,
    }


def test_a_worker_killed_after_the_launch_leaves_an_unknown_job_not_a_second_launch(
    cloud, tmp_path, live_server
):
    served, state = cloud
    state.webhook_url = f"{live_server.url}/hooks/webscraper/{SECRET}"
    run = make_run(remote_dataset("webscraper", sitemap_id=7, poll_interval=0.2))
    make_tasks(run, 3)
    log = tmp_path / "workers.log"

    a = start_work("wa", env_for(served, SALVAGE_FAULT_POINT="after_submit_before_save"), log)
    assert a.wait(timeout=60) == -signal.SIGKILL
    assert stats(served)["created"] == 1
    job = RemoteJob.objects.get()
    assert job.state == "created" and job.provider_job_id is None

    b = start_work("wb", env_for(served), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.get().state == "unknown", PROCESS_DEADLINE, what="unknown"
        )
    finally:
        stop_worker(b)
    for _ in range(3):
        remote.worker_step("check")
    assert stats(served)["created"] == 1 and RemoteJob.objects.count() == 1

    # The job's final-status notification names it (custom_id = our run id): the evidence
    # the operator uses to attach the id. The notification alone attaches nothing.
    receipt = wait_for(
        lambda: WebhookReceipt.objects.filter(job__isnull=True).first(),
        PROCESS_DEADLINE,
        what="receipt",
    )
    assert receipt.body["custom_id"] == str(run.pk)
    assert RemoteJob.objects.get().state == "unknown"
    reconcile.attach_job_id(
        job.pk, receipt.provider_job_id, actor="alice", reason="webhook receipt names our run"
    )
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
    text = log.read_text()
    assert TOKEN not in text and SECRET not in text
    assert scan_database_for([TOKEN, SECRET]) == []


def test_a_worker_killed_while_polling_is_resumed_without_a_second_launch(cloud, tmp_path):
    served, state = cloud
    state.faults["hold"] = 1
    run = make_run(remote_dataset("webscraper", sitemap_id=7, poll_interval=0.2))
    make_tasks(run, 2)
    log = tmp_path / "workers.log"
    a = start_work("wa", env_for(served), log)
    try:
        wait_for(
            lambda: RemoteJob.objects.filter(state="pending").exists(),
            PROCESS_DEADLINE,
            what="A polling",
        )
    finally:
        a.kill()
        a.wait(timeout=10)
    job = RemoteJob.objects.get()
    b = start_work("wb", env_for(served), log)
    try:
        httpx.post(f"{served.base_url}/_sim/finish/{job.provider_job_id}", timeout=5)
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    finally:
        stop_worker(b)
    assert stats(served)["created"] == 1 and RemoteJob.objects.count() == 1
    assert Observation.objects.filter(run=run).count() == 2
    assert TOKEN not in log.read_text()
