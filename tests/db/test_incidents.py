"""Incidents (seed 001 §04): every terminal error answer of each provider simulator is kept as
one row: endpoint, method, HTTP status, UTC time, request options, response headers and body,
with the job, attempt and run it belongs to; no credential, token or cookie in it. Also each
page response that quarantines its task. Pruned with their run's artefacts."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import ModuleType

import httpx
import pytest
from django.core.management import call_command
from django.utils import timezone

from recovery import remote, worker
from recovery.models import Incident, RemoteJob, Run, Task
from recovery.sandbox import messora, tornado, webscraper
from recovery.states.choices import RunState
from tests.support.direct import create_run, load_shop
from tests.support.factories import make_run, make_tasks
from tests.support.remote import (
    MESSORA_KEY,
    MESSORA_OTHER_KEY,
    remote_dataset,
    scan_database_for,
    serve,
)

pytestmark = pytest.mark.django_db

WRONG_KEY = "wrong-key-for-the-incident-test"


@dataclass
class Provider:
    module: ModuleType
    url_setting: str
    key_setting: str
    key: str
    other_key: str  # another tenant's: its lookups answer 404
    end: Callable[[str, RemoteJob, str], object]  # (base url, job, "failed"|"revoked")
    create_path: str
    status_path: Callable[[RemoteJob], str]
    options: dict = field(default_factory=dict)


def _end_messora(base: str, job: RemoteJob, how: str) -> object:
    status = {"failed": "FAILURE", "revoked": "REVOKED"}[how]
    body = {"job_id": job.provider_job_id, "status": status, "error": "target site refused"}
    return httpx.post(f"{base}/_sim/finish", json=body, timeout=5)


def _end_tornado(base: str, job: RemoteJob, how: str) -> object:
    status = {"failed": "failed", "revoked": "cancelled"}[how]
    body = {"job_id": job.provider_job_id, "status": status, "error": "codec error"}
    return httpx.post(f"{base}/_sim/finish", json=body, timeout=5)


def _end_webscraper(base: str, job: RemoteJob, how: str) -> object:
    status = {"failed": "failed", "revoked": "stopped"}[how]
    return httpx.post(f"{base}/_sim/end/{job.provider_job_id}", json={"status": status}, timeout=5)


PROVIDERS = {
    "messora": Provider(
        messora,
        "MESSORA_API_URL",
        "MESSORA_API_KEY",
        MESSORA_KEY,
        MESSORA_OTHER_KEY,
        _end_messora,
        "/batch",
        lambda job: f"/jobs/{job.provider_job_id}",
    ),
    "tornado": Provider(
        tornado,
        "TORNADO_API_URL",
        "TORNADO_API_KEY",
        "sandbox-tornado-key",
        "sandbox-tornado-other",
        _end_tornado,
        "/jobs",
        lambda job: f"/jobs/{job.provider_job_id}",
    ),
    "webscraper": Provider(
        webscraper,
        "WEBSCRAPER_API_URL",
        "WEBSCRAPER_API_TOKEN",
        "sandbox-webscraper-token",
        "sandbox-webscraper-other",
        _end_webscraper,
        "/api/v1/scraping-job",
        lambda job: f"/api/v1/scraping-job/{job.provider_job_id}",
        {"sitemap_id": 7},
    ),
}

# Each terminal error: what it makes of the job, the HTTP status kept, the call it answered.
ERRORS = {
    "refused": ("failed", 401, "submit"),
    "rate_limited": ("failed", 429, "submit"),
    "not_found": ("lookup_failed", 404, "status"),
    "failed": ("failed", 200, "status"),
    "revoked": ("revoked", 200, "status"),
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request, settings):
    p = PROVIDERS[request.param]
    served, state = serve(p.module, polls_to_finish=1, run_seconds=0.05)
    setattr(settings, p.url_setting, served.base_url)
    setattr(settings, p.key_setting, p.key)
    settings.SALVAGE_REMOTE_POLL_FAILURES = 0
    yield request.param, p, served, state
    served.stop()


def _make(name: str, p: Provider) -> tuple[Run, list[Task]]:
    run = make_run(remote_dataset(name, poll_interval=0, request_timeout=2, **p.options))
    return run, make_tasks(run, 1)


def _cause(error: str, p: Provider, served, state, settings) -> RemoteJob:
    """Drive one job into `error` through the engine's own steps, over the simulator."""
    if error == "refused":
        setattr(settings, p.key_setting, WRONG_KEY)
    if error == "rate_limited":
        state.faults["create_429"] = 1
    if error in ("failed", "revoked"):
        state.faults["hold"] = 1
    remote.submit_step("w1")
    job = RemoteJob.objects.get()
    if error == "not_found":
        setattr(settings, p.key_setting, p.other_key)
    if error in ("failed", "revoked"):
        p.end(served.base_url, job, error)
    if job.state != "failed":
        remote.poll_step("w1")
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_each_terminal_error_keeps_one_incident_without_a_secret(provider, error, settings):
    name, p, served, state = provider
    run, (task,) = _make(name, p)
    job = _cause(error, p, served, state, settings)
    job_state, status, source = ERRORS[error]
    assert job.state == job_state

    incident = Incident.objects.get()
    assert (incident.provider, incident.source, incident.http_status) == (name, source, status)
    assert incident.remote_job_id == job.pk and incident.attempt_id == job.attempt_id
    assert incident.run_id == run.pk and incident.task_id == task.pk
    path = p.create_path if source == "submit" else p.status_path(job)
    assert incident.method == ("POST" if source == "submit" else "GET")
    assert incident.endpoint.startswith(served.base_url + path)
    assert abs(incident.occurred_at - timezone.now()) < timedelta(minutes=1)
    assert incident.occurred_at.utcoffset() == timedelta(0)
    assert incident.request_options == job.request_options and incident.request_options["body"]
    assert incident.response_headers["content-type"].startswith("application/json")
    assert incident.response_body and not incident.body_truncated
    body = json.loads(incident.response_body)
    if error == "rate_limited":
        assert "retry-after" in incident.response_headers
    if error == "failed" and name != "webscraper":
        assert "error" in body  # the provider's own reason, kept whole
    if error in ("failed", "revoked"):
        assert incident.outcome == job_state
    # Guarantee 11, for this table too: no credential anywhere in the database.
    assert scan_database_for([p.key, p.other_key, WRONG_KEY]) == []
    if name == "webscraper":  # its token is a query parameter of every call
        assert "api_token=[redacted]" in incident.endpoint


def test_an_answer_that_is_not_terminal_keeps_no_incident(provider, settings):
    name, p, _served, state = provider
    settings.SALVAGE_REMOTE_POLL_FAILURES = 5
    _make(name, p)
    state.faults["status_5xx"] = 1  # a failed status check is not a failed job (seed 001)
    remote.submit_step("w1")
    remote.poll_step("w1")
    assert RemoteJob.objects.get().state == "pending"
    assert not Incident.objects.exists()


def test_a_poll_budget_spent_keeps_the_last_answer(provider):
    name, p, _served, state = provider
    _make(name, p)
    state.faults["status_5xx"] = -1
    remote.submit_step("w1")
    remote.poll_step("w1")  # the budget is 0: the first failed check ends the polling
    job = RemoteJob.objects.get()
    assert job.state == "lookup_failed"
    incident = Incident.objects.get()
    assert incident.http_status == 503 and incident.outcome == "lookup_failed"
    assert "status checks failed" in incident.detail


# --- pages --------------------------------------------------------------------------------------


def test_a_page_that_quarantines_its_task_keeps_its_response(make_sandbox, tmp_path, settings):
    shop = make_sandbox(pages=40, faults="every")
    load_shop("shop-incidents")
    kinds = ("consent", "login", "challenge")
    pages = {kind: shop.products_with(kind)[0] for kind in kinds}
    good = next(i for i in range(1, shop.pages + 1) if shop.expected(i).final_state == "committed")
    run = create_run(
        "shop-incidents",
        [(shop.product_url(i), "product") for i in [*pages.values(), good]],
        tmp_path,
    )
    worker.run_until_idle("incident-test", idle_wait=2.0)

    quarantined = Task.objects.filter(run=run, state="quarantined")
    assert quarantined.count() == len(kinds)
    assert Incident.objects.count() == len(kinds)  # the committed page keeps none
    for task in quarantined:
        incident = Incident.objects.get(task=task)
        attempt = task.attempts.get(outcome="quarantined")
        assert incident.attempt_id == attempt.pk and incident.run_id == run.pk
        assert (incident.provider, incident.source, incident.method) == ("direct", "page", "GET")
        assert incident.endpoint == task.url and incident.http_status == attempt.http_status
        assert incident.outcome == task.last_error_class
        assert incident.response_body and "content-type" in incident.response_headers
        assert incident.request_options == {"page_type": "product", "depth": 0}


# --- retention ---------------------------------------------------------------------------------


def _incident(run: Run | None, **fields) -> Incident:
    return Incident.objects.create(
        run=run, provider="tornado", source="status", http_status=500, **fields
    )


def test_pruneartefacts_removes_the_incidents_of_long_published_runs_only(
    settings, tmp_path, capsys
):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    old = make_run(acceptance_state=RunState.PUBLISHED)
    Run.objects.filter(pk=old.pk).update(published_at=timezone.now() - timedelta(days=40))
    recent = make_run(acceptance_state=RunState.PUBLISHED, published_at=timezone.now())
    rejected = make_run(acceptance_state=RunState.REJECTED)
    gone = _incident(old)
    kept = [_incident(recent), _incident(rejected), _incident(None)]

    call_command("pruneartefacts", "--published-days", "30", "--dry-run")
    assert "would remove 1 incident(s) of published runs" in capsys.readouterr().out
    assert Incident.objects.count() == 4

    call_command("pruneartefacts", "--published-days", "30")
    assert "removed 1 incident(s) of published runs" in capsys.readouterr().out
    assert not Incident.objects.filter(pk=gone.pk).exists()
    assert set(Incident.objects.values_list("pk", flat=True)) == {i.pk for i in kept}
