"""Seed 003's media jobs through recovery.remote against the Tornado simulator."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from recovery import remote
from recovery.delivery import outbox
from recovery.models import Observation, OutboxEvent, RemoteJob, Task
from recovery.remote import reconcile
from recovery.sandbox import tornado as sim
from tests.support.factories import make_run, make_tasks
from tests.support.remote import remote_dataset, scan_database_for, serve, stats, wait_for

KEY = "sandbox-tornado-key"
OTHER_KEY = "sandbox-tornado-other"

pytestmark = pytest.mark.django_db


@pytest.fixture
def media(settings, tmp_path):
    served, state = serve(sim, polls_to_finish=1)
    settings.TORNADO_API_URL = served.base_url
    settings.TORNADO_API_KEY = KEY
    settings.SALVAGE_DESTINATION = f"file://{tmp_path / 'consumer'}"
    settings.SALVAGE_OUTBOX_WAKE = False
    yield served, state
    served.stop()


def make_media_run(n: int = 2, **options):
    options.setdefault("poll_interval", 0)
    options.setdefault("request_timeout", 2)
    run = make_run(remote_dataset("tornado", **options))
    return run, make_tasks(run, n)


def drive(rounds: int = 20) -> None:
    for _ in range(rounds):
        remote.step("w1")
        live = RemoteJob.objects.filter(state__in=["created", "submitted", "pending"]).exists()
        waiting = Task.objects.filter(state__in=["pending", "retry_wait"]).exists()
        if not live and not waiting:
            return
    raise AssertionError("jobs still live")


def test_each_media_job_stores_a_stable_reference_and_hands_off_once(media, tmp_path):
    served, _state = media
    run, _tasks = make_media_run(2)
    drive()
    jobs = list(RemoteJob.objects.order_by("pk"))
    assert [j.state for j in jobs] == ["completed", "completed"]
    for job in jobs:
        assert job.result_ref.startswith("media/") and job.handoff_state == "unsent"
        assert "sig=" not in json.dumps(job.last_response)  # the temporary link is not stored
    assert Observation.objects.filter(run=run).count() == 2
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    events = OutboxEvent.objects.filter(event_type="media_handoff")
    assert events.count() == 2
    # The outbox hands each result over; repeating delivery changes nothing.
    outbox.deliver_due()
    outbox.deliver_due()
    remote.sync_handoffs()
    assert set(RemoteJob.objects.values_list("handoff_state", flat=True)) == {"delivered"}
    delivered = sorted((tmp_path / "consumer").glob("*.json"))
    assert len(delivered) == 2
    refs = {json.loads(p.read_text())["payload"]["result_ref"] for p in delivered}
    assert refs == {j.result_ref for j in jobs}
    # Importing again (a second poller saw the same completion) writes no second handoff.
    job = jobs[0]
    assert remote.mark_due(job.pk)
    drive()
    assert OutboxEvent.objects.filter(event_type="media_handoff").count() == 2
    assert stats(served)["generations"] == 2 and stats(served)["created"] == 2


def test_an_expired_link_is_refreshed_by_a_lookup_not_by_regenerating(media):
    served, state = media
    state.url_ttl = 3  # whole seconds, truncated: at least 2 s to use the first link
    make_media_run(1)
    drive()
    job = RemoteJob.objects.get()
    first = remote.fresh_result_url(job.pk)
    assert httpx.get(first).status_code == 200
    wait_for(lambda: httpx.get(first).status_code == 403, 10, what="the link to expire")
    assert httpx.get(first).json()["error"] == "expired"
    fresh = remote.fresh_result_url(job.pk)
    assert fresh != first
    assert httpx.get(fresh).status_code == 200
    assert stats(served)["generations"] == 1 and stats(served)["created"] == 1
    job.refresh_from_db()
    assert fresh not in json.dumps(job.last_response or {})


def test_an_ambiguous_create_is_reconciled_not_resubmitted(media):
    served, state = media
    state.faults["create_drop"] = 1
    make_media_run(1, request_timeout=1)
    for _ in range(3):
        remote.step("w1")
    job = RemoteJob.objects.get()
    assert job.state == "unknown" and stats(served)["created"] == 1
    found = next(iter(stats(served)["jobs"]))
    reconcile.attach_job_id(job.pk, found, actor="alice", reason="found in the media console")
    drive()
    job.refresh_from_db()
    assert job.state == "completed" and stats(served)["generations"] == 1


def test_another_tenants_job_is_a_lookup_failure(media, settings):
    _served, _state = media
    make_media_run(1)
    remote.submit_step("w1")
    settings.TORNADO_API_KEY = OTHER_KEY
    remote.poll_step("w1")
    assert RemoteJob.objects.get().state == "lookup_failed"


def test_a_failed_media_job_frees_its_task_for_a_new_attempt(media):
    served, state = media
    state.faults["hold"] = 1
    make_media_run(1)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    httpx.post(f"{served.base_url}/_sim/finish", json={"job_id": job.provider_job_id})
    remote.poll_step("w1")
    job.refresh_from_db()
    assert job.state == "failed" and Task.objects.get().state == "retry_wait"


def test_the_api_key_never_reaches_the_database_or_the_logs(media, caplog):
    _served, state = media
    caplog.set_level(logging.DEBUG)
    state.faults.update({"create_drop": 1, "status_5xx": 1})
    make_media_run(3, request_timeout=1)
    deadline = time.monotonic() + 20
    while (
        time.monotonic() < deadline
        and RemoteJob.objects.filter(state__in=["created", "submitted", "pending"]).exists()
    ):
        remote.step("w1")
    outbox.deliver_due()
    remote.sync_handoffs()
    assert scan_database_for([KEY]) == []
    assert not [r for r in caplog.records if KEY in r.getMessage()]
