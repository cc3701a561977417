"""/metrics: Prometheus text of counts only, no secrets, optional bearer token."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import uuid
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from recovery import counters
from recovery.intake import schedule_metrics, schedules
from recovery.models import (
    Attempt,
    OutboxEvent,
    Run,
    RunPartition,
    Schedule,
    Task,
    WorkerHeartbeat,
)
from recovery.ops import metrics
from recovery.quality import run_metrics
from tests.db.test_schedules import make_schedule
from tests.support.factories import make_dataset, make_run, make_tasks


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
    WorkerHeartbeat.objects.create(
        worker="w1", kind="work", claimed=7, committed=5, last_seen=timezone.now()
    )
    OutboxEvent.objects.create(run=run, event_type="accepted", state="delivered", attempts=2)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    text = response.content.decode()
    assert sample(text, 'salvage_tasks{state="pending"}') == 3
    assert sample(text, 'salvage_tasks{state="committed"}') == 2
    assert sample(text, "salvage_claims_total") == 7
    assert sample(text, "salvage_commits_total") == 5
    assert sample(text, 'salvage_workers_alive{kind="work"}') == 1
    assert sample(text, 'salvage_retry_attempts{error_class="rate_limited"}') == 1
    assert sample(text, 'salvage_attempts{outcome="lost_lease"}') == 1
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


# --- the series the alerts read (deploy/prometheus/alerts.yml) ----------------------------------


def samples(client) -> dict[str, float]:
    text = client.get("/metrics").content.decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def _beat(worker: str, kind: str, seconds_ago: float) -> None:
    WorkerHeartbeat.objects.create(
        worker=worker, kind=kind, last_seen=timezone.now() - timedelta(seconds=seconds_ago)
    )


@pytest.mark.django_db
def test_it_counts_alive_processes_by_kind_with_every_kind_present(client, settings):
    settings.SALVAGE_WORKER_ALIVE_SECONDS = 30
    _beat("dispatcher", "dispatch", 1)
    _beat("deliverer", "deliver", 2)
    _beat("killed", "work", 3600)  # the only `work` process, SIGKILLed an hour ago
    _beat("cluster", "qcluster", 5)
    _beat("cluster-worker", "qcluster", 5)
    got = samples(client)
    assert {k: v for k, v in got.items() if k.startswith("salvage_workers_alive")} == {
        'salvage_workers_alive{kind="work"}': 0,
        'salvage_workers_alive{kind="qcluster"}': 2,
        'salvage_workers_alive{kind="dispatch"}': 1,
        'salvage_workers_alive{kind="deliver"}': 1,
    }


@pytest.mark.django_db
def test_it_reports_how_long_the_oldest_due_task_has_waited(client):
    now = timezone.now()
    run = make_run()
    waiting, expired, fresh_lease, later, high = make_tasks(run, 5)
    Task.objects.filter(pk=waiting.pk).update(next_attempt_at=now - timedelta(seconds=100))
    # A lease that ran out 300 s ago: due since then (the claim set next_attempt_at to it).
    Task.objects.filter(pk=expired.pk).update(
        state="leased",
        lease_until=now - timedelta(seconds=300),
        next_attempt_at=now - timedelta(seconds=300),
    )
    Task.objects.filter(pk=fresh_lease.pk).update(
        state="leased",
        lease_until=now + timedelta(seconds=60),
        next_attempt_at=now + timedelta(seconds=60),
    )
    Task.objects.filter(pk=later.pk).update(
        state="retry_wait", next_attempt_at=now + timedelta(seconds=900)
    )
    # A higher priority comes first in the claim index; the oldest is found below it.
    Task.objects.filter(pk=high.pk).update(priority=5, next_attempt_at=now - timedelta(seconds=10))
    age = samples(client)["salvage_oldest_due_task_age_seconds"]
    assert 300 <= age < 330
    Task.objects.filter(pk__in=[waiting.pk, expired.pk, high.pk]).update(state="committed")
    assert samples(client)["salvage_oldest_due_task_age_seconds"] == 0


@pytest.mark.django_db
def test_it_reports_the_newest_committed_attempt_of_any_recent_run(client):
    assert samples(client)["salvage_last_commit_timestamp_seconds"] == 0
    now = timezone.now().replace(microsecond=0)
    finished, collecting = make_run(acceptance_state="candidate"), make_run()
    task = make_tasks(finished, 1)[0]
    other = make_tasks(collecting, 1)[0]
    for t, outcome, ago in [
        (task, "committed", 120),
        (other, "committed", 600),
        (other, "retry", 5),  # a retry commits no page
        (other, "running", 1),
    ]:
        Attempt.objects.create(
            task=t,
            run=t.run,
            outcome=outcome,
            finished_at=None if outcome == "running" else now - timedelta(seconds=ago),
        )
    got = samples(client)["salvage_last_commit_timestamp_seconds"]
    assert got == (now - timedelta(seconds=120)).timestamp()


@pytest.mark.django_db
def test_it_exports_per_run_series_for_the_newest_collecting_runs_only(client, settings):
    settings.SALVAGE_METRICS_RUNS = 2
    oldest, middle, newest = make_run(), make_run(), make_run()
    done = make_run(acceptance_state="candidate")
    for run in (oldest, middle, newest, done):
        make_tasks(run, 2)
    make_tasks(newest, 1, state="committed")
    RunPartition.objects.create(run=newest, name="bad.test", quarantined=True)
    RunPartition.objects.create(run=newest, name="odd.test", provisional_at=timezone.now())
    RunPartition.objects.create(run=middle, name="fine.test")
    got = samples(client)
    runs = {
        key.split('run="')[1].split('"')[0] for key in got if key.startswith("salvage_run_tasks{")
    }
    assert runs == {str(middle.pk), str(newest.pk)}
    labels = f'run="{newest.pk}",dataset="{newest.dataset.name}"'
    assert got[f'salvage_run_tasks{{{labels},state="pending"}}'] == 2
    assert got[f'salvage_run_tasks{{{labels},state="committed"}}'] == 1
    assert got[f'salvage_run_tasks{{{labels},state="dead"}}'] == 0
    assert got[f"salvage_run_quarantined_partitions{{{labels}}}"] == 1
    assert got[f"salvage_run_provisional_flags{{{labels}}}"] == 1
    middle_labels = f'run="{middle.pk}",dataset="{middle.dataset.name}"'
    assert got[f"salvage_run_quarantined_partitions{{{middle_labels}}}"] == 0
    assert got["salvage_quarantined_partitions"] == 1


@pytest.mark.django_db
def test_it_exports_each_schedules_next_window_and_error(client):
    dataset = make_run().dataset
    common = {"dataset": dataset, "kind": "daily", "at_time": time(6, 0), "manifest_source": "x"}
    ok = Schedule.objects.create(name="daily", **common)
    Schedule.objects.create(name="broken", last_error="2026-12-01: no such file", **common)
    Schedule.objects.create(name="paused", paused=True, **common)
    got = samples(client)
    name = dataset.name
    (shown,) = [s for s in schedules.overview([ok], timezone.now()) if s["next_at"]]  # the page
    assert got[f'salvage_schedule_next_window_timestamp_seconds{{schedule="{name}/daily"}}'] == (
        shown["next_at"].timestamp()
    )
    assert f'salvage_schedule_next_window_timestamp_seconds{{schedule="{name}/paused"}}' not in got
    assert got[f'salvage_schedule_error{{schedule="{name}/broken"}}'] == 1
    assert got[f'salvage_schedule_error{{schedule="{name}/daily"}}'] == 0
    assert got[f'salvage_schedule_error{{schedule="{name}/paused"}}'] == 0


HOURLY = "%Y-%m-%dT%H:%M"


@pytest.mark.django_db
def test_it_exports_how_long_each_schedule_is_overdue_as_the_schedules_page_says(
    client, settings, tmp_path
):
    settings.SALVAGE_SCHEDULE_CHECK_SECONDS = 10.0  # a grace of one minute (twice 10 s is less)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("url\nhttps://shop.test/p/1\n")
    dataset = make_dataset()
    now = datetime(2026, 5, 12, 10, tzinfo=UTC)
    yesterday = now - timedelta(days=1)
    # No dispatcher made 09:52's window: eight minutes late (the scrape is 30 s later still).
    make_schedule(dataset, manifest, created=yesterday, name="late", daily="09:52")
    # Made half an hour ago: 10:00's window is within the grace, 11:00's still to come.
    recent = now - timedelta(minutes=30)
    make_schedule(
        dataset, manifest, created=recent, name="fine", cron="0 * * * *", window_format=HOURLY
    )
    make_schedule(dataset, manifest, created=recent, name="later", daily="11:00")
    # As late as the first, but paused since (after its window fell due): not overdue.
    make_schedule(dataset, manifest, created=yesterday, name="paused", daily="09:52")
    with time_machine.travel(now - timedelta(minutes=2), tick=False):
        schedules.set_paused(dataset.name, "paused", True, actor="test")

    with time_machine.travel(now + timedelta(seconds=30), tick=False):
        got = samples(client)
        shown = schedules.overview(Schedule.objects.all(), timezone.now())  # the Schedules page
        page = {item["schedule"].name: item for item in shown}

    overdue = {
        key.split('schedule="')[1].split('"')[0]: value
        for key, value in got.items()
        if key.startswith("salvage_schedule_overdue_seconds{")
    }
    name = dataset.name
    assert overdue == {f"{name}/late": 8 * 60 + 30, f"{name}/fine": 0, f"{name}/later": 0}
    # The page's figures: the late one's oldest window due 8 minutes before now, no other.
    assert page["late"]["overdue"] == (now - timedelta(minutes=8), "2026-05-12")
    assert [s for s, item in page.items() if item["overdue"]] == ["late"]


@pytest.mark.django_db
def test_the_schedule_series_cost_one_query_however_many_schedules(tmp_path):
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("url\nhttps://shop.test/p/1\n")
    dataset = make_dataset()
    created = timezone.now() - timedelta(days=2)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            schedule_metrics.write(metrics.Exposition(), timezone.now())
        return len(captured.captured_queries)

    make_schedule(dataset, manifest, created=created, name="s0", daily="06:00")
    one = queries()
    for i in range(1, 8):  # overdue (created days ago, never run), healthy, paused alike
        make_schedule(
            dataset,
            manifest,
            created=created,
            name=f"s{i}",
            cron="*/5 * * * *",
            window_format=HOURLY,
        )
    schedules.set_paused(dataset.name, "s1", True, actor="test")
    assert queries() == one == 1


@pytest.mark.django_db
def test_it_exports_its_version_and_the_oldest_unsent_delivery(client):
    run = make_run()
    OutboxEvent.objects.create(
        run=run, event_type="accepted", next_attempt_at=timezone.now() - timedelta(seconds=50)
    )
    OutboxEvent.objects.create(run=run, event_type="published", state="delivered")
    got = samples(client)
    assert got[f'salvage_build_info{{version="{importlib.metadata.version("salvage")}"}}'] == 1
    assert 50 <= got["salvage_oldest_unsent_delivery_age_seconds"] < 80


@pytest.mark.django_db
def test_every_total_is_a_counter_and_every_counter_a_total(client):
    text = client.get("/metrics").content.decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert {name for name, kind in types.items() if kind == "counter"} == {
        name for name in types if name.endswith("_total")
    }


@pytest.mark.django_db
def test_the_alert_series_read_tasks_and_attempts_through_indexes(postgres_only):
    """EXPLAIN the queries behind the alerts' series on a 30,000-task run: no sequential scan
    of the task or attempt table, so a scrape costs the same however big the runs grow."""
    # bench/dashboard.py makes big runs in SQL and EXPLAINs captured queries.
    path = Path(__file__).resolve().parents[2] / "bench" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("bench_dashboard", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    run = Run.objects.create(dataset=make_dataset(), window="big")
    bench.generate(run.pk, 30_000)
    counters.rebuild(run.pk)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE recovery_task")
        cursor.execute("ANALYZE recovery_attempt")
    now = timezone.now()
    with CaptureQueriesContext(connection) as captured:
        assert metrics.oldest_due_task(now) is not None  # the run has pending tasks
        assert metrics.last_commit([run.pk]) is not None
        out = metrics.Exposition()
        run_metrics.write(out, now)
        schedule_metrics.write(out, now)
    seq_scans, indexes = bench.explain(captured.captured_queries)
    assert seq_scans == []
    assert {"task_claim_idx", "attempt_run_finished_idx"} <= set(indexes)
