"""Real `manage.py work` processes SIGKILLed around a Web Scraper Cloud launch and its sync."""

from __future__ import annotations

import signal

import httpx
import pytest

from recovery import remote
from recovery.models import Observation, RemoteJob, Task, WebhookReceipt
from recovery.remote import reconcile
from recovery.sandbox import webscraper as sim
from tests.support.factories import make_run, make_tasks
from tests.support.remote import (
    PROCESS_DEADLINE,
    remote_dataset,
    scan_database_for,
    simulator_fixture,
    wait_for,
)

TOKEN = "sandbox-webscraper-token"
SECRET = "hook-secret-77aa01"

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

cloud = simulator_fixture(
    sim,
    url="WEBSCRAPER_API_URL",
    secrets={"WEBSCRAPER_API_TOKEN": TOKEN, "WEBSCRAPER_WEBHOOK_SECRET": SECRET},
    run_seconds=0.2,
)


def test_a_worker_killed_after_the_launch_leaves_an_unknown_job_not_a_second_launch(
    cloud, remote_workers, live_server
):
    cloud.state.webhook_url = f"{live_server.url}/hooks/webscraper/{SECRET}"
    run = make_run(remote_dataset("webscraper", sitemap_id=7, poll_interval=0.2))
    make_tasks(run, 3)

    a = remote_workers.start("wa", cloud.env(SALVAGE_FAULT_POINT="after_submit_before_save"))
    assert a.wait(timeout=60) == -signal.SIGKILL
    assert cloud.stats()["created"] == 1
    job = RemoteJob.objects.get()
    assert job.state == "created" and job.provider_job_id is None

    with remote_workers.running("wb", cloud.env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "unknown", PROCESS_DEADLINE, what="unknown"
        )
    for _ in range(3):
        remote.worker_step("check")
    assert cloud.stats()["created"] == 1 and RemoteJob.objects.count() == 1

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
    with remote_workers.running("wc", cloud.env()):
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert Observation.objects.filter(run=run).count() == 3
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert cloud.stats()["created"] == 1
    text = remote_workers.log_text()
    assert TOKEN not in text and SECRET not in text
    assert scan_database_for([TOKEN, SECRET]) == []


def test_a_worker_killed_while_polling_is_resumed_without_a_second_launch(cloud, remote_workers):
    cloud.state.faults["hold"] = 1
    run = make_run(remote_dataset("webscraper", sitemap_id=7, poll_interval=0.2))
    make_tasks(run, 2)
    a = remote_workers.start("wa", cloud.env())
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
    with remote_workers.running("wb", cloud.env()):
        httpx.post(f"{cloud.served.base_url}/_sim/finish/{job.provider_job_id}", timeout=5)
        wait_for(
            lambda: RemoteJob.objects.get().state == "completed",
            PROCESS_DEADLINE,
            what="completion",
        )
    assert cloud.stats()["created"] == 1 and RemoteJob.objects.count() == 1
    assert Observation.objects.filter(run=run).count() == 2
    assert TOKEN not in remote_workers.log_text()
