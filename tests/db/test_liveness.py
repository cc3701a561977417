"""Worker liveness: one definition of alive / stale / gone, shared by the workers page and
/metrics; heartbeats create and refresh a process's row; provider-held tasks are shown by job."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from recovery import remote
from recovery.models import RemoteJob, WorkerHeartbeat
from recovery.ops import liveness
from tests.support.factories import make_dataset, make_run, make_tasks
from tests.support.list_csv import list_rows
from tests.support.world import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def short(settings):
    settings.SALVAGE_HEARTBEAT_SECONDS = 1
    settings.SALVAGE_WORKER_ALIVE_SECONDS = 10
    settings.SALVAGE_WORKER_GONE_SECONDS = 60
    return settings


def _row(name: str, seen_ago: float, *, stopped: bool = False) -> WorkerHeartbeat:
    now = timezone.now()
    return WorkerHeartbeat.objects.create(
        worker=name,
        kind="work",
        last_seen=now - timedelta(seconds=seen_ago),
        stopped_at=now if stopped else None,
    )


def test_it_calls_a_row_alive_stale_or_gone_by_the_thresholds_in_python_and_in_sql(short):
    rows = {
        "fresh": _row("fresh", 1),
        "edge-alive": _row("edge-alive", 9),
        "missed-beats": _row("missed-beats", 11),
        "almost-gone": _row("almost-gone", 59),
        "silent": _row("silent", 61),
        "stopped": _row("stopped", 0, stopped=True),
    }
    now = timezone.now()
    expected = {
        "fresh": "alive",
        "edge-alive": "alive",
        "missed-beats": "stale",
        "almost-gone": "stale",
        "silent": "gone",
        "stopped": "gone",
    }
    assert {n: liveness.status(r.last_seen, r.stopped_at, now) for n, r in rows.items()} == (
        expected
    )
    for status in liveness.Status.values:
        in_sql = set(
            WorkerHeartbeat.objects.filter(liveness.status_q(status, now)).values_list(
                "worker", flat=True
            )
        )
        assert in_sql == {n for n, s in expected.items() if s == status}
    assert liveness.counts(now) == {"alive": 2, "stale": 2, "gone": 2}


def test_metrics_count_alive_workers_with_the_same_definition(short, client):
    _row("a", 1)
    _row("b", 30)  # stale: not alive
    _row("c", 0, stopped=True)
    text = client.get("/metrics").content.decode()
    assert 'salvage_workers_alive{kind="work"} 1\n' in text
    assert 'salvage_workers_alive{kind="dispatch"} 0\n' in text
    assert "a heartbeat in the last 10 s" in text


def test_a_beat_creates_the_row_then_refreshes_it_and_goodbye_makes_it_gone(short):
    liveness.beat("w-beat", liveness.WorkerKind.DISPATCH)
    row = WorkerHeartbeat.objects.get(worker="w-beat")
    assert (row.kind, row.stopped_at) == ("dispatch", None)
    WorkerHeartbeat.objects.filter(pk=row.pk).update(
        last_seen=timezone.now() - timedelta(seconds=30)
    )
    liveness.beat("w-beat", liveness.WorkerKind.DISPATCH)
    row.refresh_from_db()
    assert liveness.status(row.last_seen, row.stopped_at) == "alive"
    liveness.goodbye("w-beat")
    row.refresh_from_db()
    assert row.stopped_at is not None
    assert liveness.status(row.last_seen, row.stopped_at) == "gone"


def test_a_claim_keeps_the_kind_a_beat_recorded(short):
    from recovery import leases

    liveness.beat("q-1", liveness.WorkerKind.QCLUSTER)
    leases.touch_worker("q-1", claimed=3)
    row = WorkerHeartbeat.objects.get(worker="q-1")
    assert (row.kind, row.claimed) == ("qcluster", 3)


def test_settings_refuse_thresholds_that_would_call_a_live_worker_stale(monkeypatch):
    import importlib

    from django.core.exceptions import ImproperlyConfigured

    import recovery.settings as product_settings

    monkeypatch.setenv("SALVAGE_HEARTBEAT_SECONDS", "30")
    monkeypatch.setenv("SALVAGE_WORKER_ALIVE_SECONDS", "20")
    with pytest.raises(ImproperlyConfigured, match="SALVAGE_WORKER_ALIVE_SECONDS"):
        importlib.reload(product_settings)
    monkeypatch.undo()
    importlib.reload(product_settings)


def test_the_workers_page_shows_status_legend_and_tasks_held_by_a_provider_job(short):
    _row("w-alive", 1)
    _row("w-stale", 30)
    _row("w-gone", 600)
    run = make_run(make_dataset(provider="messora"))
    make_tasks(run, 3)
    (job_pk,) = remote.open_jobs("w-alive", max_jobs=1)
    RemoteJob.objects.filter(pk=job_pk).update(
        submitted_at=timezone.now() - timedelta(minutes=5, seconds=3)
    )
    client = Client()
    client.force_login(make_user("olivia", "operator"))

    page = client.get("/workers/").content.decode()

    assert "w-alive" in page and "w-stale" in page
    assert "w-gone" not in page  # by default: the processes that may still be running
    assert "[invalid name]" not in page  # every filter has its label
    assert "a heartbeat in the last 10 s" in page  # the legend states the thresholds
    assert "no heartbeat for 60 s" in page
    text = re.sub(r"<[^>]+>", "", page)
    assert text.count(f"held by job #{job_pk} (messora, submitted 5 min ago)") == 3
    assert "9000" not in page  # never the parked lease date
    gone = client.get("/workers/?status=gone").content.decode()
    assert "w-gone" in gone and "w-alive" not in gone


def test_a_provider_job_imports_commit_row_is_never_a_worker(short, client):
    """An import commits under remote:<job id>, and the commit's upsert (the statement
    leases.touch_worker runs) gave it a heartbeat row: the workers page listed it, alive for
    the first seconds and stale after, and the status counts and dead-worker alert took it."""
    from recovery import attention, leases
    from recovery.remote.jobs import worker_label

    _row("w-alive", 1)
    leases.touch_worker(worker_label(3), claimed=2, committed=2)  # just now: "alive"
    leases.touch_worker(worker_label(4), claimed=1, committed=1)
    WorkerHeartbeat.objects.filter(worker="remote:4").update(
        last_seen=timezone.now() - timedelta(seconds=30)  # "stale"
    )
    assert worker_label(3).startswith(liveness.REMOTE_JOB_PREFIX)
    assert liveness.counts()["alive"] == 1
    assert liveness.counts()["stale"] == 0
    assert sum(liveness.alive_by_kind().values()) == 1
    assert list(attention.dead_workers()) == []
    operator = Client()
    operator.force_login(make_user("olivia", "operator"))
    page = operator.get("/workers/?status=all").content.decode()
    assert "w-alive" in page
    assert "remote:3" not in page and "remote:4" not in page
    export = operator.get("/workers.csv?status=all")
    text = b"".join(export.streaming_content).decode()
    list_rows(text)  # whole
    assert "w-alive" in text and "remote:" not in text
