"""Each list's CSV export (`<list>.csv`): the same filterset, search and order as the page, every
page of it, streamed in keyset chunks; the page's export link keeps its filters and drops its
cursor. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import lists
from recovery.models import AuditEntry, Task
from tests.support.factories import make_tasks
from tests.support.list_csv import list_rows
from tests.support.world import logged_in, make_users, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    w = make_world()
    w.users = make_users()
    return w


_client = logged_in


def _page_rows(client: Client, url: str, params: dict) -> list:
    """Every row the page shows, following its own next links."""
    rows = []
    while True:
        response = client.get(url, params)
        assert response.status_code == 200, response.content[:300]
        listing = response.context["listing"]
        rows.extend(listing.rows)
        if not listing.next_href:
            return rows
        params = {k: v[0] for k, v in parse_qs(urlsplit(listing.next_href).query).items()}


def _csv(response) -> list[dict]:
    assert response.status_code == 200, response.content[:300]
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"].startswith("attachment;")
    body = b"".join(response.streaming_content).decode()
    return list_rows(body)


def _combined(world):
    # Three pages of dead zeta.test tasks whose URLs begin with the searched prefix, and rows
    # that each filter or the search alone would let through.
    make_tasks(world.run, 120, partition="zeta.test", state="dead", host="zeta.test")
    make_tasks(world.run, 30, partition="zeta.test", state="committed", host="zeta.test")
    make_tasks(world.run, 30, partition="eta.test", state="dead", host="eta.test")
    make_tasks(world.run, 30, partition="zeta.test", state="dead", host="zetaplus.test")
    return {"state": "dead", "partition": "zeta.test", "q": "zeta.test/"}


@pytest.mark.parametrize("sort", [None, "-id"])
def test_a_task_export_holds_exactly_the_rows_of_every_page_in_their_order(world, sort):
    params = _combined(world)
    if sort:
        params["sort"] = sort
    client = _client(world, "operator")
    page_url = reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})
    shown = _page_rows(client, page_url, params)
    assert len(shown) == 120  # three pages of 50: the export must follow past the first
    assert {(t.state, t.partition) for t in shown} == {("dead", "zeta.test")}
    assert all(t.url.startswith("http://zeta.test/") for t in shown)

    # The page's own export link: its filters and search, no cursor.
    first = client.get(page_url, {**params, "after": ""}).context["listing"]
    second = client.get(page_url + first.next_href).context["listing"]
    export_href = second.export_href
    assert export_href.startswith(
        reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk}) + "?"
    )
    assert "after" not in parse_qs(urlsplit(export_href).query)
    assert export_href == first.export_href

    exported = _csv(client.get(export_href))
    assert [int(r["id"]) for r in exported] == [t.pk for t in shown]
    one = Task.objects.get(pk=shown[0].pk)
    row = exported[0]
    assert (row["url"], row["state"], row["partition"], row["run"]) == (
        one.url,
        one.state,
        one.partition,
        str(world.run.pk),
    )


def test_the_quarantine_export_is_the_quarantine_list(world):
    make_tasks(world.run, 70, partition="zeta.test", state="dead", host="zeta.test")
    client = _client(world, "operator")
    args = {"run_id": world.run.pk}
    params = {"state": "dead", "sort": "-id"}
    shown = _page_rows(client, reverse("dashboard:quarantine", kwargs=args), params)
    exported = _csv(client.get(reverse("dashboard:quarantine_csv", kwargs=args), params))
    assert [int(r["id"]) for r in exported] == [t.pk for t in shown]
    assert len(shown) >= 70


def test_an_export_reads_in_bounded_keyset_chunks(world, monkeypatch):
    # Memory stays flat: every read of the task table is a LIMITed keyset page, never the
    # whole selection at once.
    make_tasks(world.run, 130, partition="zeta.test", state="dead", host="zeta.test")
    real = lists.Listing.rows_for_export
    monkeypatch.setattr(
        lists.Listing, "rows_for_export", lambda self, chunk=500: real(self, chunk=40)
    )
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk})
    with CaptureQueriesContext(connection) as captured:
        rows = _csv(client.get(url, {"state": "dead"}))
    expected = Task.objects.filter(run=world.run, state="dead").count()
    assert len(rows) == expected > 120
    reads = [q["sql"] for q in captured.captured_queries if 'FROM "recovery_task"' in q["sql"]]
    assert len(reads) == expected // 40 + 1
    assert all("LIMIT 41" in sql for sql in reads)


def test_an_exact_key_in_the_search_exports_the_search_rows_instead_of_redirecting(world):
    client = _client(world, "operator")
    task = Task.objects.filter(run=world.run).first()
    args = {"run_id": world.run.pk}
    assert (
        client.get(reverse("dashboard:run_tasks", kwargs=args), {"q": task.url}).status_code == 302
    )
    rows = _csv(client.get(reverse("dashboard:run_tasks_csv", kwargs=args), {"q": task.url}))
    assert str(task.pk) in [r["id"] for r in rows]
    assert all(r["url"].startswith(task.url) for r in rows)


def test_an_export_refuses_filters_the_list_refuses(world):
    client = _client(world, "admin")
    response = client.get(reverse("dashboard:runs_csv"), {"state": "bogus"})
    assert response.status_code == 400
    assert b"state" in response.content
    assert client.get(reverse("dashboard:runs_csv"), {"sort": "bogus"}).status_code == 400


def test_every_list_exports_what_it_shows(world):
    admin = _client(world, "admin")
    for name in ("runs", "reconcile", "deliveries", "workers", "audit", "datasets"):
        page = admin.get(reverse(f"dashboard:{name}"), {"sort": "", "q": ""})
        listing = page.context["listing"]
        assert listing.export_href == reverse(f"dashboard:{name}_csv"), name
        assert f'href="{listing.export_href}"'.encode() in page.content, name
        rows = _csv(admin.get(listing.export_href))
        assert [r[listing.spec.columns[0].header] for r in rows] == [
            str(lists.Column("", listing.spec.columns[0].path).value(row)) for row in listing.rows
        ], name
    exporter = _client(world, "exporter")
    page = exporter.get(reverse("dashboard:exports"))
    assert page.context["listing"].export_href == reverse("dashboard:exports_csv")
    assert _csv(exporter.get(reverse("dashboard:exports_csv")))


def test_a_cell_a_spreadsheet_would_run_is_neutralised(world):
    AuditEntry.objects.create(
        actor="adam", action="note", object_type="run", object_id="1", reason="=HYPERLINK(1)"
    )
    rows = _csv(_client(world, "admin").get(reverse("dashboard:audit_csv")))
    assert "'=HYPERLINK(1)" in [r["reason"] for r in rows]
    assert "=HYPERLINK(1)" not in [r["reason"] for r in rows]


def test_a_whole_export_ends_with_its_row_count_and_a_cut_one_does_not(world):
    client = _client(world, "operator")
    url = reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk})
    empty = b"".join(client.get(url, {"state": "dead"}).streaming_content).decode()
    assert empty.splitlines() == [empty.splitlines()[0], "# complete: 0 rows"]

    make_tasks(world.run, 1_200, partition="zeta.test", state="dead", host="zeta.test")
    chunks = list(client.get(url, {"state": "dead"}).streaming_content)
    assert len(chunks) > 2  # streamed in keyset chunks: a cut can fall between any two
    assert len(list_rows(b"".join(chunks))) == 1_200
    cut = b"".join(chunks[:-1])  # what a saved file holds when the last chunk never came
    assert cut.count(b"\n") > 1_000
    with pytest.raises(AssertionError, match="no trailer"):
        list_rows(cut)
