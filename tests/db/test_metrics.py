"""/metrics: Prometheus text of counts only, no secrets, optional bearer token."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from recovery.models import Attempt, OutboxEvent, WorkerHeartbeat
from tests.factories import make_run, make_tasks


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in metrics")


@pytest.mark.django_db
def test_it_reports_tasks_claims_retries_and_deliveries(client, settings):
    settings.MESSORA_API_KEY = "sekrit-messora-key-123"
    run = make_run()
    tasks = make_tasks(run, 3, partition="a")
    make_tasks(run, 2, partition="b", state="committed")
    Attempt.objects.create(
        id=uuid.uuid4(), task=tasks[0], run=run, outcome="retry", error_class="rate_limited"
    )
    Attempt.objects.create(id=uuid.uuid4(), task=tasks[1], run=run, outcome="lost_lease")
    WorkerHeartbeat.objects.create(worker="w1", claimed=7, committed=5, last_seen=timezone.now())
    OutboxEvent.objects.create(run=run, event_type="accepted", state="delivered", attempts=2)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert sample(text, 'salvage_tasks{state="pending"}') == 3
    assert sample(text, 'salvage_tasks{state="committed"}') == 2
    assert sample(text, "salvage_claims_total") == 7
    assert sample(text, "salvage_commits_total") == 5
    assert sample(text, "salvage_workers_alive") == 1
    assert sample(text, 'salvage_retries_total{error_class="rate_limited"}') == 1
    assert sample(text, "salvage_lease_expiries_total") == 1
    assert sample(text, 'salvage_deliveries{state="delivered"}') == 1
    assert sample(text, "salvage_delivery_attempts_total") == 2
    assert "# TYPE salvage_claims_total counter" in text
    assert "sekrit" not in text and "shop.test" not in text


@pytest.mark.django_db
def test_it_needs_the_bearer_token_when_one_is_configured(client, settings):
    settings.SALVAGE_METRICS_TOKEN = "metrics-token-abc"
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token-abc")
    assert ok.status_code == 200
