"""Web Scraper Cloud through recovery.remote and the webhook endpoint, against the simulator."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.utils import timezone

from recovery import remote
from recovery.models import (
    Attempt,
    Dataset,
    Observation,
    ObservationVersion,
    OutboxEvent,
    RemoteJob,
    RemoteJobItem,
    Task,
    WebhookReceipt,
)
from recovery.sandbox import webscraper as sim
from recovery.states import run as run_states
from tests.support.factories import make_run, make_tasks
from tests.support.remote import remote_dataset, scan_database_for, serve, stats, wait_for

TOKEN = "sandbox-webscraper-token"
OTHER_TOKEN = "sandbox-webscraper-other"
SECRET = "hook-secret-5b1d2e9f"

pytestmark = pytest.mark.django_db


@pytest.fixture
def cloud(settings):
    served, state = serve(sim, run_seconds=0.1)
    settings.WEBSCRAPER_API_URL = served.base_url
    settings.WEBSCRAPER_API_TOKEN = TOKEN
    settings.WEBSCRAPER_WEBHOOK_SECRET = SECRET
    settings.SALVAGE_BACKOFF_BASE = 0.0  # a retriable item is resubmitted at once
    yield served, state
    served.stop()


def make_cloud_run(n: int = 3, **options):
    options.setdefault("sitemap_id", 7)
    options.setdefault("poll_interval", 0)
    options.setdefault("request_timeout", 2)
    run = make_run(remote_dataset("webscraper", **options))
    return run, make_tasks(run, n)


def sync_until(predicate, what: str, timeout: float = 60.0):
    """Run the worker's remote step until `predicate()` holds (bounded by a deadline)."""

    def probe():
        remote.worker_step("w1")
        return predicate()

    return wait_for(probe, timeout, interval=0.05, what=what)


def job_done() -> bool:
    return not RemoteJob.objects.filter(state__in=["created", "submitted", "pending"]).exists()


def all_done() -> bool:
    """No live job, and no task waiting for another submission (retries included)."""
    remote.submit_step("w1")
    return job_done() and not Task.objects.filter(state__in=["pending", "retry_wait"]).exists()


def test_it_launches_one_cloud_job_per_run_and_imports_its_rows(cloud):
    served, _state = cloud
    run, tasks = make_cloud_run(3)
    assert remote.submit_step("w1")
    job = RemoteJob.objects.get()
    assert job.kind == "cloud" and job.state == "submitted"
    launched = stats(served)["jobs"][job.provider_job_id]
    assert launched["custom_id"] == str(run.pk)
    assert launched["start_urls"] == [t.url for t in tasks]
    sync_until(job_done, "the job to finish")
    job.refresh_from_db()
    assert job.state == "completed"
    assert Observation.objects.filter(run=run).count() == 3
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert stats(served)["created"] == 1


def test_a_forged_webhook_is_a_404_and_stores_nothing(cloud, client, settings):
    run, _tasks = make_cloud_run(1)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    form = {"scrapingjob_id": job.provider_job_id, "status": "finished", "custom_id": run.pk}
    for secret in ("wrong", SECRET[:-1], SECRET + "x", "x" * 200):
        assert client.post(f"/hooks/webscraper/{secret}", form).status_code == 404
    settings.WEBSCRAPER_WEBHOOK_SECRET = ""  # no secret configured: the endpoint does not exist
    assert client.post("/hooks/webscraper/", form).status_code == 404
    assert client.post("/hooks/webscraper/anything", form).status_code == 404
    assert WebhookReceipt.objects.count() == 0


def test_webhook_checks_the_secret_in_constant_time():
    import inspect

    from recovery.remote import webhooks

    assert "hmac.compare_digest" in inspect.getsource(webhooks.secret_matches)


def test_a_webhook_is_only_a_hint_that_makes_the_job_due(cloud, client):
    _served, state = cloud
    state.faults["hold"] = 1
    run, _tasks = make_cloud_run(2, poll_interval=3600)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    assert job.next_poll_at > timezone.now()
    form = {
        "scrapingjob_id": job.provider_job_id,
        "status": "finished",  # a lie: the API still says "started"
        "sitemap_id": "7",
        "sitemap_name": "shop",
        "custom_id": str(run.pk),
        "unexpected": "dropped",
    }
    response = client.post(f"/hooks/webscraper/{SECRET}", form)
    assert response.status_code == 200
    receipt = WebhookReceipt.objects.get()
    assert receipt.job_id == job.pk and receipt.status == "finished"
    assert "unexpected" not in receipt.body
    job.refresh_from_db()
    assert job.next_poll_at <= timezone.now()
    remote.worker_step("w1")
    job.refresh_from_db()
    # The API says the job still runs: nothing is imported on the hint's word.
    assert job.state == "pending"
    assert Observation.objects.count() == 0 and RemoteJobItem.objects.count() == 0


def test_a_snapshot_downloaded_while_the_job_runs_is_never_promoted(cloud):
    _served, state = cloud
    state.faults["start_on_download"] = 1  # a Continue races the download
    run, _tasks = make_cloud_run(4)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    wait_for(
        lambda: stats(_served)["jobs"][job.provider_job_id]["status"] == "finished",
        10,
        what="first finish",
    )
    remote.worker_step("w1")  # finished -> download (the job restarts) -> confirm: started
    job.refresh_from_db()
    assert job.state == "pending"
    assert RemoteJobItem.objects.count() == 0
    sync_until(job_done, "the job to finish again")
    assert Observation.objects.filter(run=run).count() == 4  # the complete data, not half


def test_continue_resynchronises_and_adds_only_the_new_rows(cloud, client):
    served, _state = cloud
    run, _tasks = make_cloud_run(3)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    sync_until(job_done, "the first synchronisation")
    before = dict(Observation.objects.values_list("observation_key", "updated_at"))
    assert len(before) == 3
    httpx.post(f"{served.base_url}/_sim/continue/{job.provider_job_id}", json={"rows": 2})
    wait_for(lambda: stats(served)["jobs"][job.provider_job_id]["rows"] == 5, 10, what="continue")
    # Its notification arrives (as the service would send it after the Continue).
    form = {"scrapingjob_id": job.provider_job_id, "status": "finished", "custom_id": run.pk}
    assert client.post(f"/hooks/webscraper/{SECRET}", form).status_code == 200
    job.refresh_from_db()
    assert job.state == "pending"  # completed -> pending: due for a re-synchronisation
    sync_until(job_done, "the re-synchronisation")
    after = dict(Observation.objects.values_list("observation_key", "updated_at"))
    assert len(after) == 5
    assert {k: after[k] for k in before} == before  # old rows untouched
    assert RemoteJobItem.objects.filter(job=job).count() == 5
    assert stats(served)["created"] == 1


def test_partial_success_relaunches_only_the_failed_start_urls(cloud):
    served, state = cloud
    state.faults["partial"] = 1  # start URL #1 failed, #2 came back empty
    run, tasks = make_cloud_run(4)
    sync_until(all_done, "all jobs and retries to finish")
    first, second = RemoteJob.objects.order_by("pk")
    assert [t["id"] for t in second.input_ref["tasks"]] == [tasks[1].pk]
    assert stats(served)["jobs"][second.provider_job_id]["start_urls"] == [tasks[1].url]
    failed = RemoteJobItem.objects.get(job=first, status="failed")
    assert failed.retried_in_id == second.pk
    assert RemoteJobItem.objects.get(job=first, status="empty").retried_in_id is None
    by_task = {t.pk: t for t in Task.objects.all()}
    assert by_task[tasks[1].pk].state == "committed"
    assert by_task[tasks[2].pk].state == "quarantined"
    assert by_task[tasks[2].pk].last_error_class == "empty_shell"
    assert stats(served)["created"] == 2
    assert Observation.objects.filter(run=run).count() == 3


def test_another_accounts_job_is_a_lookup_failure(cloud, settings):
    _served, _state = cloud
    make_cloud_run(1)
    remote.submit_step("w1")
    settings.WEBSCRAPER_API_TOKEN = OTHER_TOKEN
    remote.worker_step("w1")
    assert RemoteJob.objects.get().state == "lookup_failed"


def test_the_api_token_never_reaches_the_database_or_the_logs(cloud, caplog, client):
    _served, state = cloud
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx")  # it logs each full URL at INFO
    state.faults.update({"create_drop": 1, "status_5xx": 1, "partial": 1})
    make_cloud_run(3)
    remote.submit_step("w1")
    assert RemoteJob.objects.get().state == "unknown"
    make_cloud_run(3)
    sync_until(all_done, "jobs and retries to finish")
    job = RemoteJob.objects.filter(state="completed").first()
    client.post(f"/hooks/webscraper/{SECRET}", {"scrapingjob_id": job.provider_job_id})
    assert scan_database_for([TOKEN, SECRET]) == []
    leaked = [r.getMessage() for r in caplog.records if TOKEN in r.getMessage()]
    assert leaked == []
    assert any("api_token=[redacted]" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
def test_duplicate_notifications_over_real_sockets_make_one_logical_import(cloud, live_server):
    served, state = cloud
    state.webhook_url = f"{live_server.url}/hooks/webscraper/{SECRET}"
    # The real service's wait for a 2xx before it resends. The simulator's default (2 s) is
    # shorter than a first request to the live server takes on a loaded 2-core box (~3 s
    # seen at load 18), which made every notification a resend.
    state.webhook_timeout = 10.0
    state.faults["duplicate_webhook"] = 1
    state.faults["early_webhook"] = 1  # and one out of order, before the job finished
    run, _tasks = make_cloud_run(3, poll_interval=3600)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()

    def acknowledged() -> bool:
        # Read in-process: polling /_sim/stats over HTTP every 50 ms took the GIL from the
        # live server's and the simulator's threads, the very threads being waited on.
        return len([n for n in list(state.notifications) if n["answer"] == 200]) >= 3

    wait_for(acknowledged, 60, what="three acknowledged notifications")
    assert WebhookReceipt.objects.filter(job=job).count() == 3
    sync_until(job_done, "the synchronisation")
    remote.worker_step("w1")
    assert Observation.objects.filter(run=run).count() == 3
    assert RemoteJobItem.objects.filter(job=job).count() == 3
    # One attempt per task from this job, however many notifications arrived.
    assert Attempt.objects.filter(run=run, worker=f"remote:{job.pk}").count() == 3
    # Every notification got a prompt 2xx, so the service never had to resend.
    assert all(n["answer"] == 200 for n in stats(served)["notifications"])


def test_webhook_body_abuse_is_refused_or_sanitised_never_a_500(cloud, client):
    big = "x" * (64 * 1024)
    response = client.post(
        f"/hooks/webscraper/{SECRET}",
        data=f"scrapingjob_id=1&status={big}",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 413
    assert WebhookReceipt.objects.count() == 0
    response = client.post(
        f"/hooks/webscraper/{SECRET}",
        data=b"scrapingjob_id=1&status=finished&custom_id=api_token%3Dabc",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 200
    receipt = WebhookReceipt.objects.get()
    assert "abc" not in receipt.body.get("custom_id", "")
    assert client.get(f"/hooks/webscraper/{SECRET}").status_code == 405


FORM = "application/x-www-form-urlencoded"
BAD_BODIES = [
    # (content type, body, what the 400 names)
    ("application/json", b'{"scrapingjob_id": 1, "status": "finished"}', "Content-Type"),
    ("text/plain", b"scrapingjob_id=1", "Content-Type"),
    (FORM, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8"),
    (FORM, b"scrapingjob_id=%ff%fe&status=finished", "not UTF-8"),
    (FORM, b"scrapingjob_id=1&status=fin%00ished", "control character"),
    (FORM, b"scrapingjob_id=1&status=finished\x00", "control character"),
    (FORM, b"scrapingjob_id=1&scrapingjob_id=2", "more than once"),
    (FORM, b"scrapingjob_id=1&&&status", "not a form"),
    (FORM, b"status=finished", "scrapingjob_id is missing"),
    (FORM, b"", "Content-Type"),  # the test client drops the type of an empty body
    (FORM, b"scrapingjob_id=1/../2", "not a job id"),
    (FORM, b"scrapingjob_id=1&custom_id=" + b"x" * 201, "longer than 200"),
    (FORM, b"&".join(b"f%d=1" % i for i in range(40)) + b"&scrapingjob_id=1", "not a form"),
    ("multipart/form-data; boundary=zzz", b"--zzz\r\nbroken", "no closing boundary"),
    ("multipart/form-data", b"no boundary at all", "multipart body is broken"),
    # Cut off before the closing delimiter: every field is there, the end is not.
    (
        "multipart/form-data; boundary=zzz",
        b'--zzz\r\nContent-Disposition: form-data; name="scrapingjob_id"\r\n\r\n55\r\n'
        b'--zzz\r\nContent-Disposition: form-data; name="status"\r\n\r\nfinished\r\n',
        "no closing boundary",
    ),
]


@pytest.mark.parametrize(("content_type", "body", "message"), BAD_BODIES)
def test_a_body_that_is_not_a_well_formed_notification_is_a_400_and_stores_nothing(
    cloud, client, content_type, body, message
):
    response = client.post(f"/hooks/webscraper/{SECRET}", data=body, content_type=content_type)
    assert response.status_code == 400, response.content
    assert message in response.json()["error"]
    assert WebhookReceipt.objects.count() == 0


def test_a_multipart_notification_with_a_file_is_refused(cloud, client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("x.bin", b"\x00" * 10)
    form = {"scrapingjob_id": "1", "status": "finished", "custom_id": upload}
    response = client.post(f"/hooks/webscraper/{SECRET}", form)
    assert response.status_code == 400
    assert WebhookReceipt.objects.count() == 0


def test_a_well_formed_multipart_notification_is_stored(cloud, client):
    form = {"scrapingjob_id": "31", "status": "finished", "custom_id": "7"}
    assert client.post(f"/hooks/webscraper/{SECRET}", form).status_code == 200
    assert WebhookReceipt.objects.get().body == form


def test_a_continue_that_changes_a_published_value_makes_a_new_version_and_a_correction(cloud):
    served, _state = cloud
    run, _tasks = make_cloud_run(3)
    # One entity per start URL: the Continue's extra row for the first start URL is a new
    # value of an entity the first synchronisation delivered (its price differs).
    spec = dict(run.dataset.spec, entity_key={"field": "web-scraper-start-url"})
    Dataset.objects.filter(pk=run.dataset_id).update(spec=spec)
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    sync_until(job_done, "the first synchronisation")
    assert Observation.objects.filter(run=run).count() == 3
    for source, target in [("collecting", "candidate"), ("candidate", "accepted")]:
        assert run_states.move(run.pk, source, target)
    assert run_states.move(run.pk, "accepted", "published")
    first_url = job.input_ref["tasks"][0]["url"]
    published = Observation.objects.get(run=run, entity_key=first_url)
    assert (published.version, published.payload["price"]) == (1, "10.99")

    httpx.post(f"{served.base_url}/_sim/continue/{job.provider_job_id}", json={"rows": 1})
    wait_for(lambda: stats(served)["jobs"][job.provider_job_id]["rows"] == 4, 10, what="continue")
    assert remote.mark_due(job.pk)
    sync_until(job_done, "the re-synchronisation")

    published.refresh_from_db()
    assert (published.version, published.payload["price"]) == (2, "13.99")
    (old,) = ObservationVersion.objects.filter(observation=published)
    assert (old.version, old.payload["price"]) == (1, "10.99")
    (event,) = OutboxEvent.objects.filter(run=run, event_type=OutboxEvent.Kind.CORRECTION)
    assert event.payload["observation_key"] == published.observation_key
    assert (event.payload["previous_version"], event.payload["version"]) == (1, 2)
    assert Observation.objects.filter(run=run).count() == 3
    # The re-synchronised row is traceable to an attempt of its task, written by the import.
    assert Attempt.objects.filter(pk=published.source_attempt_id, worker=f"remote:{job.pk}")


def test_a_notification_that_beats_the_saved_job_id_is_attached_and_makes_the_job_due(
    cloud, client
):
    _served, state = cloud
    state.faults["hold"] = 1
    run, _tasks = make_cloud_run(2, poll_interval=3600)
    # The simulator's first job is number 500: its notification arrives before our COMMIT of
    # that id (a job that finishes at once), so nothing yet names job 500.
    form = {"scrapingjob_id": "500", "status": "finished", "custom_id": str(run.pk)}
    assert client.post(f"/hooks/webscraper/{SECRET}", form).status_code == 200
    assert WebhookReceipt.objects.get().job_id is None
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    assert job.provider_job_id == "500"
    assert WebhookReceipt.objects.get().job_id == job.pk
    assert job.next_poll_at <= timezone.now()  # due now, not in an hour
