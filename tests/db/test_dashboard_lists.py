"""Dashboard lists (dashboard.lists): keyset pages that follow the sort, filters kept by the
pager, URL-prefix search on its index, exact keys that open their object, and a 400 for a
cursor, sort or filter value a list cannot use. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from recovery import keys
from recovery.models import AuditEntry, Observation, RemoteJob, Run, Task
from tests.support.factories import make_dataset, make_run, make_tasks
from tests.support.list_csv import list_rows
from tests.support.world import logged_in, make_users, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    w = make_world()
    w.users = make_users()
    return w


_client = logged_in


def _walk(client: Client, url: str, params: dict) -> list[list]:
    """Every page of a list, following its own next links; the rows of each."""
    pages = []
    while True:
        response = client.get(url, params)
        assert response.status_code == 200, response.content[:300]
        listing = response.context["listing"]
        pages.append(listing.rows)
        if not listing.next_href:
            return pages
        params = {k: v[0] for k, v in parse_qs(urlsplit(listing.next_href).query).items()}


BAD_CURSORS = [
    "\x00",
    json.dumps(["\x00", 1]),
    "not json",
    json.dumps([]),
    json.dumps(["a", 1, 2]),
    json.dumps([None, 1]),
    json.dumps([1.5, 1]),
    json.dumps(["x", "y"]),
    json.dumps(["x", 10**30]),
    '["\\ud800", 1]',
    "[" * 5000,
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_it_answers_400_for_a_cursor_a_list_cannot_use(world, cursor):
    admin = _client(world, "admin")
    run_tasks = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    assert admin.get(run_tasks, {"after": cursor}).status_code == 400
    for name in ("runs", "reconcile", "deliveries", "workers", "audit"):
        response = admin.get(reverse(f"dashboard:{name}"), {"after": cursor})
        assert response.status_code == 400, (name, cursor)
    exporter = _client(world, "exporter")
    assert exporter.get(reverse("dashboard:exports"), {"after": cursor}).status_code == 400


def test_it_answers_400_for_a_nul_in_the_exports_cursor(world):
    # Issue 13: `GET /exports/?after=%00` was a 500 on PostgreSQL.
    response = _client(world, "exporter").get("/exports/?after=%00")
    assert response.status_code == 400


def test_it_answers_400_for_an_unknown_sort_or_a_filter_value_it_cannot_use(world):
    admin = _client(world, "admin")
    assert admin.get(reverse("dashboard:runs"), {"sort": "bogus"}).status_code == 400
    assert admin.get(reverse("dashboard:runs"), {"state": "bogus"}).status_code == 400
    assert admin.get(reverse("dashboard:reconcile"), {"run": "x"}).status_code == 400
    tasks = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    assert admin.get(tasks, {"partition": "a\x00b"}).status_code == 400
    assert admin.get(tasks, {"q": "http://a\x00"}).status_code == 400


def test_it_pages_a_runs_tasks_in_url_order_both_ways(world):
    make_tasks(world.run, 130, partition="zeta.test", host="zeta.test")
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    every = list(Task.objects.filter(run=world.run))
    in_order = sorted(every, key=lambda t: (t.url[:500].encode(), t.pk))

    pages = _walk(client, url, {})
    assert len(pages) == 3 and all(pages)
    assert [t.pk for page in pages for t in page] == [t.pk for t in in_order]

    back = _walk(client, url, {"sort": "-url"})
    assert [t.pk for page in back for t in page] == [t.pk for t in reversed(in_order)]


def test_the_pager_keeps_combined_filters(world):
    make_tasks(world.run, 60, partition="zeta.test", state="dead", host="zeta.test")
    make_tasks(world.run, 60, partition="zeta.test", state="committed", host="zeta.test")
    make_tasks(world.run, 60, partition="eta.test", state="dead", host="eta.test")
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    first = client.get(url, {"state": "dead", "partition": "zeta.test", "q": ""})
    listing = first.context["listing"]
    query = parse_qs(urlsplit(listing.next_href).query)
    assert query.keys() == {"state", "partition", "after"}  # the blank q is dropped
    assert not listing.next_href.startswith("??")
    pages = _walk(client, url, {"state": "dead", "partition": "zeta.test"})
    rows = [t for page in pages for t in page]
    assert len(rows) == 60
    assert {(t.state, t.partition) for t in rows} == {("dead", "zeta.test")}


def test_it_finds_tasks_by_url_prefix_with_or_without_the_scheme(world):
    make_tasks(world.run, 5, partition="zeta.test", host="zeta.test")
    make_tasks(world.run, 5, partition="zeta.test", host="zetaplus.test")
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    for q in ("http://zeta.test/", "zeta.test/", "HTTP://ZETA.TEST/item"):
        rows = client.get(url, {"q": q}).context["listing"].rows
        assert len(rows) == 5, q
        assert all(t.url.startswith("http://zeta.test/") for t in rows)
    assert client.get(url, {"q": "zeta"}).context["listing"].rows.__len__() == 10
    assert client.get(url, {"q": "http://nowhere.test/"}).context["listing"].rows == []


def test_an_exact_key_goes_straight_to_its_object(world):
    client = _client(world, "operator")
    task = Task.objects.filter(run=world.run, state="committed").first()
    task_page = reverse("dashboard:task", kwargs={"task_id": task.pk})
    tasks = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    runs = reverse("dashboard:runs")

    assert client.get(runs, {"q": task.task_key}).url == task_page
    assert client.get(tasks, {"q": task.url}).url == task_page
    observation = Observation.objects.filter(run=world.run).select_related("source_task").first()
    source = reverse("dashboard:task", kwargs={"task_id": observation.source_task_id})
    assert client.get(runs, {"q": observation.observation_key}).url == source
    assert client.get(tasks, {"q": observation.entity_key}).url == source
    assert keys.observation_key("shop", observation.entity_key, world.run.window) == (
        observation.observation_key
    )
    RemoteJob.objects.filter(pk=world.job.pk).update(provider_job_id="msg-job-77")
    job_task = reverse("dashboard:task", kwargs={"task_id": world.job.attempt.task_id})
    assert client.get(runs, {"q": "msg-job-77"}).url == job_task


def test_the_reconcile_queue_searches_provider_job_ids_in_every_state(world):
    RemoteJob.objects.filter(pk=world.job.pk).update(
        provider_job_id="msg-job-77", state="completed"
    )
    client = _client(world, "operator")
    url = reverse("dashboard:reconcile")
    assert client.get(url).context["listing"].rows == []  # nothing needs a decision
    assert [j.pk for j in client.get(url, {"q": "msg-job"}).context["listing"].rows] == [
        world.job.pk
    ]
    assert client.get(url, {"q": "other"}).context["listing"].rows == []
    assert [
        j.pk for j in client.get(url, {"job": world.job.pk, "state": "any"}).context["listing"].rows
    ] == [world.job.pk]


def test_the_audit_log_sorts_oldest_first_and_pages_on(world):
    for i in range(55):
        AuditEntry.objects.create(actor="adam", action="bulk", object_type="x", object_id=str(i))
    client = _client(world, "admin")
    url = reverse("dashboard:audit")
    newest = [e.pk for page in _walk(client, url, {"action": "bulk"}) for e in page]
    oldest = [e.pk for page in _walk(client, url, {"action": "bulk", "sort": "at"}) for e in page]
    assert len(newest) == 55 and oldest == list(reversed(newest))


def _page_queries(captured: CaptureQueriesContext) -> list[str]:
    """The task page's row query (it orders by the URL key; the capped count does not)."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if "substr(" in q["sql"] and not q["sql"].startswith("SELECT COUNT(*)")
    ]


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            # A few rows sort for free; without a sort only an index in URL order can serve.
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("EXPLAIN " + sql)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(str(row) for row in cursor.fetchall())


def test_the_task_list_and_its_url_search_read_the_url_index(world):
    """The list's expression matches the migration's index exactly (else the 1M-task page
    would sort the whole run)."""
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    for params in ({}, {"q": "http://beta.test/"}, {"sort": "-url"}):
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url, params).status_code == 200
        (sql,) = _page_queries(captured)
        assert "task_run_url_idx" in _plan(sql), params


def test_a_state_filter_lists_tasks_in_task_order_on_the_state_index(world):
    make_tasks(world.run, 70, partition="zeta.test", state="dead", host="zeta.test")
    make_tasks(world.run, 5, partition="eta.test", state="committed", host="eta.test")
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    dead = sorted(Task.objects.filter(run=world.run, state="dead").values_list("pk", flat=True))
    assert [t.pk for p in _walk(client, url, {"state": "dead"}) for t in p] == dead
    newest = _walk(client, url, {"state": "dead", "sort": "-id"})
    assert [t.pk for p in newest for t in p] == list(reversed(dead))
    quarantine = reverse("dashboard:quarantine", kwargs={"run_id": world.run.pk})
    assert [t.pk for p in _walk(client, quarantine, {"state": "dead"}) for t in p] == dead
    with CaptureQueriesContext(connection) as captured:
        client.get(url, {"state": "dead"})
    (sql,) = _page_queries(captured)
    assert "task_run_state_idx" in _plan(sql)


def test_task_order_without_a_state_falls_back_to_url_order(world):
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    response = client.get(url, {"sort": "id"})
    assert response.status_code == 200
    listing = response.context["listing"]
    assert listing.sort == "url" and "sort" not in listing.params
    # Without a state no index serves task order: the header is not a link.
    assert b'href="?sort=id' not in response.content


def test_a_partition_alone_lists_its_tasks_by_state_then_task_on_its_index(world):
    make_tasks(world.run, 40, partition="zeta.test", state="committed", host="zeta.test")
    make_tasks(world.run, 30, partition="zeta.test", state="dead", host="zeta2.test")
    make_tasks(world.run, 10, partition="eta.test", state="dead", host="eta.test")
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    expected = [
        t.pk
        for t in sorted(
            Task.objects.filter(run=world.run, partition="zeta.test"), key=lambda t: (t.state, t.pk)
        )
    ]
    first = client.get(url, {"partition": "zeta.test"}).context["listing"]
    assert first.sort == "state"
    assert [t.pk for p in _walk(client, url, {"partition": "zeta.test"}) for t in p] == expected
    whole = [t.pk for p in _walk(client, url, {"sort": "-state"}) for t in p]
    assert whole == [
        t.pk
        for t in sorted(Task.objects.filter(run=world.run), key=lambda t: (t.state, t.pk))[::-1]
    ]
    with CaptureQueriesContext(connection) as captured:
        client.get(url, {"partition": "zeta.test"})
    (sql,) = _page_queries(captured)
    assert "task_run_part_state_idx" in _plan(sql)


ODD_SEARCHES = ["http://[", "%", "_", "'", "\\", "a" * 2000, "\U0010ffff", "http://", "://", "-"]


@pytest.mark.parametrize("q", ODD_SEARCHES)
def test_every_search_box_takes_odd_text_without_an_error(world, q):
    admin = _client(world, "admin")
    pages = [
        reverse("dashboard:runs"),
        reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk}),
        reverse("dashboard:quarantine", kwargs={"run_id": world.run.pk}),
        reverse("dashboard:reconcile"),
        reverse("dashboard:deliveries"),
        reverse("dashboard:workers"),
        reverse("dashboard:audit"),
        reverse("dashboard:datasets"),
    ]
    for url in pages:
        response = admin.get(url, {"q": q})
        assert response.status_code == 200, (url, q, response.status_code)
        if q in ("%", "_", "'", "\\"):
            # Text, never a pattern: no task URL, worker or name begins with these.
            assert response.context["listing"].rows == [], (url, q)


def test_deliveries_find_an_event_by_its_id_or_its_beginning(world):
    client = _client(world, "admin")
    url = reverse("dashboard:deliveries")
    event = world.failed_event
    for q in (str(event.pk), str(event.pk)[:8], str(event.pk).upper()):
        assert [e.pk for e in client.get(url, {"q": q}).context["listing"].rows] == [event.pk]


def test_a_url_search_finds_any_part_with_contains_on_postgresql_and_the_start_elsewhere(world):
    from dashboard import filtersets

    make_tasks(world.run, 5, partition="zeta.test", host="zeta.test")
    make_tasks(world.run, 5, partition="zeta.test", host="shop.zeta.test")
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})

    def urls(**params) -> set[str]:
        response = client.get(url, params)
        assert response.status_code == 200
        return {t.url for t in response.context["listing"].rows}

    begins = urls(q="zeta.test/item/")  # without match=contains: the beginning
    assert len(begins) == 5 and all(u.startswith("http://zeta.test/") for u in begins)
    page = client.get(url)
    if connection.vendor == "postgresql":
        assert filtersets.contains_search()
        assert b'name="match"' in page.content and b"any part of a URL" in page.content
        found = urls(q="zeta.test/item/", match="contains")
        assert len(found) == 10 and all("zeta.test/item/" in u for u in found)
        # Text, never a pattern: % and _ match themselves only; under 3 characters, nothing.
        assert urls(q="zeta%item", match="contains") == set()
        assert urls(q="ze", match="contains") == set()
        # The export shares the filterset: the same rows.
        export = client.get(
            reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk}),
            {"q": "zeta.test/item/", "match": "contains"},
        )
        rows = list_rows(b"".join(export.streaming_content))
        assert {row["url"] for row in rows} == found
        with CaptureQueriesContext(connection) as captured:
            client.get(url, {"q": "zeta.test/item/", "match": "contains"})
        # Only the list's own query: the page's worker figures also say LIKE ('remote:%').
        (sql,) = [
            q["sql"]
            for q in captured.captured_queries
            if filtersets.URL_SEARCH_TABLE in q["sql"]
            and "LIKE" in q["sql"]
            and not q["sql"].startswith("SELECT COUNT(*)")  # the capped count: the same search
        ]
        # The search's own predicate, alone (a test run is too small for the planner to
        # prefer it over the run's indexes): the trigram index serves it as written, on the
        # side table (migration 0021), not on recovery_task.
        (like,) = re.findall(r"WHERE url LIKE '[^']*'", sql)
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN SELECT task_id FROM {filtersets.URL_SEARCH_TABLE} {like}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Bitmap Index Scan on task_url_trgm_idx" in plan, plan
    else:
        assert not filtersets.contains_search()
        # SQLite: no contains choice; the beginning only, and the page says so.
        assert b'name="match"' not in page.content
        assert b"by their beginning only" in page.content
        assert urls(q="zeta.test/item/", match="contains") == begins
        assert urls(q="test/item/") == set()


def test_it_filters_tasks_by_http_status_and_attempts_in_the_page_and_its_export(world):
    tasks = make_tasks(world.run, 6, partition="status.test", host="status.test")
    ids = [t.pk for t in tasks]
    Task.objects.filter(pk__in=ids[:2]).update(last_http_status=503, attempt_count=4)
    Task.objects.filter(pk__in=ids[2:4]).update(last_http_status=404, attempt_count=1)
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    csv_url = reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk})

    def listed(**params) -> set[int]:
        rows = [row for page in _walk(client, url, params) for row in page]
        export = b"".join(client.get(csv_url, params).streaming_content)
        exported = {row["id"] for row in list_rows(export)}
        assert exported == {str(t.pk) for t in rows}, "the page and its export differ"
        return {t.pk for t in rows}

    assert listed(http_status="503") == set(ids[:2])
    assert listed(attempts="2", partition="status.test") == set(ids[:2])
    assert listed(http_status="404", attempts="1") == set(ids[2:4])
    assert listed(http_status="404", attempts="2") == set()
    response = client.get(url, {"http_status": "42"})
    assert response.status_code == 400


@pytest.mark.parametrize(
    "list_name, kwargs",
    [("run_tasks", True), ("runs", False), ("deliveries", False), ("workers", False)],
)
def test_it_refuses_a_parameter_the_list_does_not_read_naming_it(world, list_name, kwargs):
    client = _client(world, "admin")
    args = {"run_id": world.run.pk} if kwargs else {}
    for name in (list_name, f"{list_name}_csv"):
        response = client.get(reverse(f"dashboard:{name}", kwargs=args), {"http_stauts": "503"})
        assert response.status_code == 400, (name, response.content[:300])
        assert b"http_stauts" in response.content
    # The parameters the list does read still work.
    assert client.get(reverse(f"dashboard:{list_name}", kwargs=args), {"q": ""}).status_code == 200


def _walk_back(client: Client, url: str, params: dict) -> list[list]:
    """From the last page to the first, following each page's previous link."""
    last = _walk(client, url, params)[-1]
    listing = client.get(url, params).context["listing"]
    while listing.next_href:
        listing = client.get(url, _query(listing.next_href)).context["listing"]
    assert listing.rows == last
    pages = [listing.rows]
    while listing.prev_href:
        response = client.get(url, _query(listing.prev_href))
        assert response.status_code == 200, response.content[:300]
        listing = response.context["listing"]
        pages.append(listing.rows)
    return pages[::-1]


def _query(href: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(href).query).items()}


# Issue 29: a run's tasks sort on every column an operator expects, each on its own index.
TASK_SORTS = {
    "attempts": (lambda t: (t.attempt_count, t.pk), "task_run_attempts_idx"),
    # No status yet sorts as 0, below every status (the cursor cannot step over NULL).
    "http": (lambda t: (t.last_http_status or 0, t.pk), "task_run_http_idx"),
    "error_class": (lambda t: (t.last_error_class, t.pk), "task_run_error_sort_idx"),
    "changed": (lambda t: (t.state_changed_at, t.pk), "task_run_changed_idx"),
}


def _varied_tasks(run: Run) -> None:
    """70 more tasks whose sort columns repeat (ties the id must break) and include the blanks."""
    now = timezone.now()
    for i, task in enumerate(make_tasks(run, 70, partition="zeta.test", host="zeta.test")):
        Task.objects.filter(pk=task.pk).update(
            attempt_count=(i * 7) % 5,
            last_http_status=(None, 200, 404, 503, 429, 200)[i % 6],
            last_error_class=("", "server_error", "challenge_page", "", "rate_limited")[i % 5],
            state_changed_at=now - timedelta(minutes=(i * 3) % 7),
        )


@pytest.mark.parametrize("sort", TASK_SORTS)
def test_it_pages_a_runs_tasks_by_each_column_both_ways(world, sort):
    _varied_tasks(world.run)
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    key, _index = TASK_SORTS[sort]
    in_order = [t.pk for t in sorted(Task.objects.filter(run=world.run), key=key)]
    assert len(in_order) == 78

    for params, expected in (
        ({"sort": sort, "size": "25"}, in_order),
        ({"sort": f"-{sort}", "size": "25"}, in_order[::-1]),
    ):
        pages = _walk(client, url, params)
        assert len(pages) == 4 and all(pages), params
        assert [t.pk for page in pages for t in page] == expected, params
        # The previous links walk the same pages back (the index read backwards).
        back = _walk_back(client, url, params)
        assert [[t.pk for t in page] for page in back] == [[t.pk for t in p] for p in pages]
    # The column's header sorts, and says which way.
    response = client.get(url, {"sort": sort})
    assert f'href="?sort=-{sort}"'.encode() in response.content
    # The CSV export walks the same order, page by page.
    export = reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk})
    assert _csv_ids(client.get(export, {"sort": f"-{sort}"})) == in_order[::-1]


@pytest.mark.parametrize("sort", TASK_SORTS)
def test_each_task_column_sort_reads_its_index(world, sort):
    _varied_tasks(world.run)
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    _key, index = TASK_SORTS[sort]
    for params in ({"sort": sort}, {"sort": f"-{sort}", "size": "25"}):
        page = client.get(url, params).context["listing"]
        params = {**params, "after": _query(page.next_href)["after"]}
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url, params).status_code == 200
        (sql,) = _page_queries(captured)
        assert index in _plan(sql), (params, _plan(sql))


def test_it_answers_400_for_a_text_cursor_in_the_http_status_order(world):
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    for cursor in (json.dumps(["200", 1]), json.dumps([10**30, 1]), json.dumps([None, 1])):
        assert client.get(url, {"sort": "http", "after": cursor}).status_code == 400, cursor


RUN_SORTS = {
    "dataset": lambda r: (r.dataset.name, r.window),
    "window": lambda r: (r.window, r.pk),
    "created": lambda r: (r.created_at, r.pk),
}


@pytest.mark.parametrize("sort", RUN_SORTS)
def test_it_pages_the_runs_by_dataset_window_and_creation_both_ways(world, sort):
    now = timezone.now()
    datasets = [make_dataset(name=name) for name in ("delta", "alpha", "omega")]
    for i in range(30):
        make_run(
            datasets[i % 3],
            window=f"2026-{(i * 7) % 12 + 1:02d}-{i:02d}",
            created_at=now - timedelta(hours=(i * 5) % 4),
        )
    client = _client(world, "operator")
    url = reverse("dashboard:runs")
    runs = Run.objects.select_related("dataset")
    in_order = [r.pk for r in sorted(runs, key=RUN_SORTS[sort])]
    assert len(in_order) > 25 * 1

    for params, expected in (
        ({"sort": sort, "size": "25"}, in_order),
        ({"sort": f"-{sort}", "size": "25"}, in_order[::-1]),
    ):
        pages = _walk(client, url, params)
        assert len(pages) == 2 and all(pages), params
        assert [r.pk for page in pages for r in page] == expected, params
        back = _walk_back(client, url, params)
        assert [[r.pk for r in page] for page in back] == [[r.pk for r in p] for p in pages]
    response = client.get(url, {"sort": sort})
    assert f'href="?sort=-{sort}"'.encode() in response.content
    export = reverse("dashboard:runs_csv")
    assert _csv_ids(client.get(export, {"sort": sort})) == in_order


def _csv_ids(response) -> list[int]:
    assert response.status_code == 200
    return [int(row["id"]) for row in list_rows(b"".join(response.streaming_content))]
