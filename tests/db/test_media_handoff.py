"""Seed 003's media handoff to the end, on the Tornado simulator over real sockets: the result
accepted, the handoff delivered, the consumer's acknowledgement (once, by a token that is never
stored); an expired link refreshed (command and dashboard) without regenerating anything; a
missing file (404 or 410) its own state, regenerated only behind a confirmation that says it is
a new paid job."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from recovery import remote
from recovery.delivery import media_ack, outbox
from recovery.models import AuditEntry, Incident, OutboxEvent, RecoveryBatch, RemoteJob, Task
from recovery.sandbox import tornado as sim
from tests.support.factories import make_run, make_tasks
from tests.support.remote import remote_dataset, scan_database_for, serve, stats, wait_for
from tests.support.world import make_users

KEY = "sandbox-tornado-key"

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


def drive(rounds: int = 20) -> None:
    for _ in range(rounds):
        remote.step("w1")
        live = RemoteJob.objects.filter(state__in=["created", "submitted", "pending"]).exists()
        waiting = Task.objects.filter(state__in=["pending", "retry_wait"]).exists()
        if not live and not waiting:
            return
    raise AssertionError("jobs still live")


def handed_off(tmp_path) -> tuple[RemoteJob, dict]:
    """One media job completed, its handoff delivered to the file drop; (job, document)."""
    run = make_run(remote_dataset("tornado", poll_interval=0, request_timeout=2))
    make_tasks(run, 1)
    drive()
    outbox.deliver_due()
    remote.sync_handoffs()
    job = RemoteJob.objects.get()
    (path,) = (tmp_path / "consumer").glob("*.json")
    return job, json.loads(path.read_text())


def acknowledge(client: Client, path: str, authorization: str | None):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    return client.post(path, **headers)


def test_it_records_accepted_delivered_and_the_consumers_acknowledgement_once(
    media, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    job, document = handed_off(tmp_path)
    assert job.handoff_state == "delivered"
    assert job.result_accepted_at is not None
    assert job.handoff_delivered_at is not None and job.consumer_finished_at is None
    assert job.result_accepted_at <= job.handoff_delivered_at
    event = OutboxEvent.objects.get(event_type="media_handoff")
    assert job.handoff_delivered_at == event.delivered_at
    # The document tells the consumer where and how to acknowledge; the token is signed at
    # send time and never stored.
    ack = document["acknowledge"]
    assert ack["method"] == "POST" and ack["path"] == f"/hooks/media/{job.pk}/finished"
    token = ack["authorization"].removeprefix("Bearer ")
    assert token == media_ack.token(job.pk, job.attempt_id)
    assert token not in json.dumps(event.payload)

    client = Client()
    assert acknowledge(client, ack["path"], None).status_code == 401
    forged = token[:-1] + ("1" if token.endswith("0") else "0")  # never the token itself
    assert acknowledge(client, ack["path"], "Bearer " + forged).status_code == 403
    assert (
        acknowledge(client, "/hooks/media/999999/finished", ack["authorization"]).status_code == 403
    )
    assert RemoteJob.objects.get(pk=job.pk).consumer_finished_at is None

    first = acknowledge(client, ack["path"], ack["authorization"])
    assert first.status_code == 200 and first.json()["first"] is True
    again = acknowledge(client, ack["path"], ack["authorization"])
    assert again.status_code == 200 and again.json()["first"] is False
    assert again.json()["finished_at"] == first.json()["finished_at"]
    job.refresh_from_db()
    assert job.handoff_state == "finished" and job.consumer_finished_at is not None
    assert AuditEntry.objects.filter(action="media_consumer_finished").count() == 1
    # Guarantee 11: neither the token nor the key is in the database or a log line.
    assert scan_database_for([token, KEY]) == []
    assert not [r for r in caplog.records if token in r.getMessage()]


def test_an_acknowledgement_overtakes_a_mirror_that_lags(media, tmp_path):
    run = make_run(remote_dataset("tornado", poll_interval=0, request_timeout=2))
    make_tasks(run, 1)
    drive()
    outbox.deliver_due()  # delivered, but sync_handoffs has not mirrored it yet
    job = RemoteJob.objects.get()
    assert job.handoff_state == "unsent"
    # Unsent is never finished: nothing was handed off as far as this job knows...
    with pytest.raises(remote.HandoffError, match="never handed off"):
        remote.consumer_finished(job.pk, media_ack.token(job.pk, job.attempt_id))
    remote.sync_handoffs()
    remote.consumer_finished(job.pk, media_ack.token(job.pk, job.attempt_id))
    job.refresh_from_db()
    assert job.handoff_state == "finished"
    assert remote.sync_handoffs() == 0  # the mirror never moves a finished handoff back


def test_an_expired_link_is_refreshed_by_the_command_without_regenerating(media, tmp_path, capsys):
    served, state = media
    state.url_ttl = 2  # whole seconds, truncated: the first link expires within 2 s
    job, _document = handed_off(tmp_path)
    first = remote.fresh_result_url(job.pk)
    wait_for(lambda: httpx.get(first).status_code == 403, 10, what="the link to expire")
    assert httpx.get(first).json()["error"] == "expired"

    state.url_ttl = 300
    call_command("refreshmedia", str(job.pk), "--actor", "olivia")
    lines = capsys.readouterr().out.strip().splitlines()
    assert "the link had expired" in lines[0]
    fresh = lines[-1]
    assert fresh != first and httpx.get(fresh).status_code == 200
    assert stats(served)["generations"] == 1 and stats(served)["created"] == 1
    job.refresh_from_db()
    assert job.handoff_state == "delivered" and job.link_checked_at is not None
    assert AuditEntry.objects.get(action="refresh_media").detail["outcome"] == "link_works"
    assert not Incident.objects.exists()
    sig = fresh.split("sig=")[1]
    assert scan_database_for([sig]) == []  # the fresh link is never stored


def test_an_expired_link_is_refreshed_from_the_jobs_page(media, tmp_path):
    served, _state = media
    job, _document = handed_off(tmp_path)
    users = make_users()
    operator = Client()
    operator.force_login(users["operator"])
    page = operator.get(reverse("dashboard:reconcile") + f"?job={job.pk}")
    refresh = reverse("dashboard:media_refresh", args=[job.pk])
    assert f'action="{refresh}"' in page.content.decode()

    response = operator.post(refresh)
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    link = response.context["refreshed"].url
    assert escape(link) in response.content.decode() and httpx.get(link).status_code == 200
    assert stats(served)["generations"] == 1
    assert scan_database_for([link.split("sig=")[1]]) == []
    nobody = Client()
    nobody.force_login(users["exporter"])
    assert nobody.post(refresh).status_code == 403


@pytest.mark.parametrize("status", [404, 410])
def test_a_missing_file_is_its_own_state_and_is_not_regenerated_by_a_refresh(
    media, tmp_path, status
):
    served, _state = media
    job, _document = handed_off(tmp_path)
    httpx.post(
        f"{served.base_url}/_sim/lose", json={"object_key": job.result_ref, "status": status}
    )
    with pytest.raises(CommandError, match="missing, not expired") as refused:
        call_command("refreshmedia", str(job.pk))
    assert refused.value.returncode == 1
    assert "new paid job" in str(refused.value)
    job.refresh_from_db()
    assert job.handoff_state == "missing"
    assert stats(served)["generations"] == 1 and stats(served)["created"] == 1
    incident = Incident.objects.get()
    assert (incident.source, incident.http_status, incident.outcome) == (
        "result",
        status,
        "missing",
    )
    assert incident.remote_job_id == job.pk and incident.method == "HEAD"
    assert incident.endpoint == f"{served.base_url}/files/{job.result_ref}"  # no signature
    assert scan_database_for([KEY, "sig="]) == []


def test_regenerating_a_missing_file_is_a_confirmed_new_paid_job(media, tmp_path):
    served, _state = media
    job, _document = handed_off(tmp_path)
    users = make_users()
    admin, operator = Client(), Client()
    admin.force_login(users["admin"])
    operator.force_login(users["operator"])
    regenerate = reverse("dashboard:media_regenerate", args=[job.pk])

    # Not missing yet: the confirmation says so and offers no button; the engine refuses.
    assert "only a result" in admin.get(regenerate).content.decode()
    with pytest.raises(remote.HandoffError, match="refresh its link first"):
        remote.regenerate_media(job.pk, "adam", "why not")

    httpx.post(f"{served.base_url}/_sim/lose", json={"object_key": job.result_ref})
    operator.post(reverse("dashboard:media_refresh", args=[job.pk]))
    page = operator.get(reverse("dashboard:reconcile") + f"?job={job.pk}").content.decode()
    assert "Regenerate" not in page  # an operator may refresh, not pay for a new job
    assert operator.get(regenerate).status_code == 403
    page = admin.get(reverse("dashboard:reconcile") + f"?job={job.pk}").content.decode()
    assert regenerate in page

    confirmation = admin.get(regenerate).content.decode()
    assert "Creates a new paid tornado job" in confirmation
    # A plain POST (no confirmation) and a confirmation without a reason change nothing.
    admin.post(regenerate, {"reason": "lost by the store"})
    admin.post(regenerate, {"confirmed": "1"})
    assert not RecoveryBatch.objects.exists() and stats(served)["created"] == 1

    response = admin.post(regenerate, {"reason": "lost by the store", "confirmed": "1"})
    batch = RecoveryBatch.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/batches/{batch.pk}/")
    job.refresh_from_db()
    assert job.handoff_state == "regenerated"
    drive()
    assert stats(served)["created"] == 2 and stats(served)["generations"] == 2
    new = RemoteJob.objects.exclude(pk=job.pk).get()
    assert new.state == "completed" and new.handoff_state == "unsent"
    assert new.input_ref["recovery_batch"] == batch.pk
    assert AuditEntry.objects.filter(action="regenerate_media", reason="lost by the store").exists()
    # Regenerated once: a second confirmation is refused and pays for nothing.
    admin.post(regenerate, {"reason": "again", "confirmed": "1"})
    assert stats(served)["created"] == 2
