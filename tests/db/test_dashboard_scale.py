"""The run pages' query shapes: no unbounded count over tasks, whatever the run's size.

The benchmark (bench/dashboard.py) times the pages at 10,000 and 1,000,000 tasks and EXPLAINs
every query; these tests pin the shapes on every run of the suite.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import charts, runstats
from recovery.quality import quarantine
from tests.support.world import make_users, make_world

pytestmark = pytest.mark.django_db

TASK_COUNT = re.compile(r'COUNT\(.*FROM "?recovery_task"?\b', re.IGNORECASE | re.DOTALL)


def _queries(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return [q["sql"] for q in captured.captured_queries]


@pytest.fixture
def admin_client(client):
    users = make_users()
    client.force_login(users["admin"])
    return client


@pytest.mark.parametrize("page", ["dashboard:runs", "dashboard:run"])
def test_it_never_counts_tasks_on_the_run_pages(admin_client, page):
    world = make_world()
    kwargs = {"run_id": world.run.pk} if page == "dashboard:run" else {}
    for sql in _queries(admin_client, reverse(page, kwargs=kwargs)):
        assert not TASK_COUNT.search(sql), sql


def test_it_counts_quarantined_tasks_only_within_a_limit(admin_client):
    world = make_world()
    url = reverse("dashboard:quarantine", kwargs={"run_id": world.run.pk})
    counted = [sql for sql in _queries(admin_client, url) if TASK_COUNT.search(sql)]
    assert counted
    for sql in counted:
        assert "LIMIT" in sql.upper(), sql


def test_it_reports_a_capped_error_sample(monkeypatch):
    world = make_world()
    monkeypatch.setattr(quarantine, "SAMPLE_CAP", 3)
    groups, capped = quarantine.error_groups(world.run.pk, "quarantined")
    assert capped
    assert sum(g.tasks for g in groups) == 4  # SAMPLE_CAP + 1 rows read, never more
    assert groups[0].error_class == "selector_failure"
    assert groups[0].sample_attempt is not None


def test_it_draws_one_bar_pair_per_minute_in_range():
    world = make_world()
    buckets = runstats.chart_buckets(world.run.pk, 15)
    assert len(buckets) == 15
    assert sum(errors for _, _, errors in buckets) == 1
    svg = str(charts.activity_chart(buckets))
    assert svg.startswith("<svg") and "errors 1" in svg
    assert str(charts.activity_chart([])).startswith("<p")


def test_it_draws_progress_bars_from_counts_only():
    svg = str(charts.progress_bar({"committed": 3, "quarantined": 1}, 4, width=100))
    assert 'width="75.00"' in svg and 'width="25.00"' in svg
    assert "quarantined: 1" in svg


def _bench_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("bench_dashboard", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_it_reads_tasks_and_attempts_through_indexes(postgres_only, admin_client):
    """EXPLAIN every query of the run pages on a 60,000-task run: no sequential scan."""
    from recovery import counters
    from recovery.models import Run
    from tests.support.factories import make_dataset

    bench = _bench_module()
    run = Run.objects.create(dataset=make_dataset(), window="big")
    bench.generate(run.pk, 60_000)
    counters.rebuild(run.pk)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE recovery_task")
        cursor.execute("ANALYZE recovery_attempt")
    for page, kwargs in [
        ("dashboard:run", {"run_id": run.pk}),
        ("dashboard:quarantine", {"run_id": run.pk}),
        ("dashboard:runs", {}),
    ]:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(reverse(page, kwargs=kwargs)).status_code == 200
        seq_scans, _indexes = bench.explain(captured.captured_queries)
        assert seq_scans == [], page
    # The task list's capped "N matching" count (issue 29) reads the index its order names:
    # unordered, this one-run table is counted with a Seq Scan under the LIMIT, which a run
    # stored after millions of other tasks would pay in full.
    tasks = reverse("dashboard:run_tasks", kwargs={"run_id": run.pk})
    # The column sorts (issue 29) too, each on its own index.
    sorts = [{"sort": s} for s in ("-state", "-attempts", "http", "-error_class", "-changed")]
    for params in ({}, *sorts, {"state": "dead"}, {"partition": "p3.test"}):
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(tasks, params)
        assert response.status_code == 200
        whole_run = set(params) <= {"sort"}  # 60,000 tasks: past the cap
        assert response.context["listing"].matching_capped == whole_run
        seq_scans, _indexes = bench.explain(captured.captured_queries)
        assert seq_scans == [], params
