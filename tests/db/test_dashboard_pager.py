"""The shared list pager (dashboard.lists, dashboard.keyset; issue 29): previous pages read the
keyset backwards, a page size among a fixed set kept by every link, and a match count that stops
at a cap. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import lists
from recovery.models import AuditEntry, OutboxEvent, Task
from tests.support.factories import make_run, make_tasks
from tests.support.list_csv import list_rows
from tests.support.world import logged_in, make_users, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    w = make_world()
    w.users = make_users()
    return w


def _params(href: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(href).query).items()}


def _get(client: Client, url: str, params: dict):
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:300]
    return response.context["listing"]


def _pks(listing) -> list:
    return [row.pk for row in listing.rows]


def _forwards_then_back(client: Client, url: str, params: dict) -> tuple[list, list]:
    """The pages met following `next` from page one, and those met following `previous` back
    from the last; each page is its rows' keys."""
    forwards = []
    listing = _get(client, url, params)
    assert not listing.prev_href  # nothing before page one
    forwards.append(_pks(listing))
    while listing.next_href:
        listing = _get(client, url, _params(listing.next_href))
        forwards.append(_pks(listing))
    backwards = [_pks(listing)]
    while listing.prev_href:
        here = _params(listing.prev_href)
        listing = _get(client, url, here)
        backwards.append(_pks(listing))
        if listing.next_href:
            # "next" from a page reached backwards is the page we came from.
            following = _get(client, url, _params(listing.next_href))
            assert _pks(following) == backwards[-2]
    return forwards, backwards


def _tasks_url(world) -> str:
    return reverse("dashboard:run_tasks", kwargs={"run_id": world.run.pk})


def _make_many(world) -> None:
    make_tasks(world.run, 40, partition="zeta.test", state="dead", host="zeta.test")
    make_tasks(world.run, 30, partition="eta.test", state="committed", host="eta.test")
    for i in range(60):
        make_run(world.run.dataset, window=f"w-{i:03}")
        OutboxEvent.objects.create(run=world.run, event_type="accepted", state="failed")
        AuditEntry.objects.create(actor="adam", action="bulk", object_type="x", object_id=str(i))


@pytest.mark.parametrize(
    "name, params",
    [
        ("run_tasks", {}),
        ("run_tasks", {"sort": "-url"}),
        ("run_tasks", {"sort": "state"}),
        ("run_tasks", {"sort": "-state", "size": "50"}),
        ("run_tasks", {"state": "dead", "sort": "-id"}),
        ("runs", {}),
        ("runs", {"sort": "id"}),
        ("deliveries", {}),
        ("deliveries", {"sort": "created"}),
        ("audit", {}),
        ("audit", {"sort": "at"}),
    ],
)
def test_it_walks_back_through_the_same_pages_in_reverse(world, name, params):
    _make_many(world)
    client = logged_in(world, "admin")
    url = _tasks_url(world) if name == "run_tasks" else reverse(f"dashboard:{name}")
    params = {"size": "25", **params}
    forwards, backwards = _forwards_then_back(client, url, params)
    assert len(forwards) >= 2, forwards
    assert backwards == forwards[::-1]
    every = [pk for page in forwards for pk in page]
    assert len(every) == len(set(every))  # no row twice, none skipped between pages
    size = int(params["size"])
    assert all(len(page) == size for page in forwards[:-1])


def test_a_page_of_25_holds_25_rows_and_every_link_keeps_the_size(world):
    make_tasks(world.run, 70, partition="zeta.test", state="dead", host="zeta.test")
    client = logged_in(world, "operator")
    url = _tasks_url(world)
    response = client.get(url, {"size": "25", "state": "dead"})
    listing = response.context["listing"]
    assert len(listing.rows) == 25
    second = _get(client, url, _params(listing.next_href))
    assert len(second.rows) == 25
    for href in (second.next_href, second.prev_href, second.first_href, second.sort_href("id")):
        assert _params(href)["size"] == "25", href
    assert {size: bool(href) for size, href in second.size_links} == {
        25: False,
        50: True,
        100: True,
        200: True,
    }
    # The default size leaves no `size=` in the address; another starts again at page one.
    sizes = dict(second.size_links)
    assert "size" not in _params(sizes[50]) and "after" not in _params(sizes[50])
    assert _params(sizes[100])["size"] == "100"
    html = client.get(url, _params(listing.next_href)).content.decode()
    assert 'name="size" value="25"' in html  # the filter form keeps it too
    paging = [h for h in re.findall(r'href="(\?[^"]*)"', html) if re.search("after=|before=", h)]
    assert len(paging) >= 2  # previous and next
    for href in paging:
        assert "size=25" in href, href


def test_the_csv_export_link_drops_the_page_parameters(world):
    make_tasks(world.run, 70, partition="zeta.test", state="dead", host="zeta.test")
    client = logged_in(world, "operator")
    url = _tasks_url(world)
    first = _get(client, url, {"size": "25", "state": "dead"})
    second = _get(client, url, _params(first.next_href))
    third = _get(client, url, _params(second.prev_href))
    for listing in (first, second, third):
        assert _params(listing.export_href) == {"state": "dead"}
    # And the export itself ignores them: every row, whatever page the address names.
    export = client.get(
        reverse("dashboard:run_tasks_csv", kwargs={"run_id": world.run.pk}),
        {"state": "dead", "size": "25", "before": second.prev_cursor},
    )
    assert export.status_code == 200
    assert len(list_rows(b"".join(export.streaming_content))) == 70


@pytest.mark.parametrize("size", ["0", "10", "51", "-25", "25.0", "abc", "1e2", "\u0662\u0665"])
def test_it_answers_400_naming_a_page_size_it_does_not_offer(world, size):
    client = logged_in(world, "admin")
    for url in (_tasks_url(world), reverse("dashboard:runs"), reverse("dashboard:audit")):
        response = client.get(url, {"size": size})
        assert response.status_code == 400, (url, size)
        assert b"size" in response.content


BAD_CURSORS = ["not json", json.dumps([]), json.dumps([None, 1]), json.dumps(["x", 10**30]), "\x00"]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_it_answers_400_for_a_before_cursor_it_cannot_use(world, cursor):
    client = logged_in(world, "admin")
    assert client.get(_tasks_url(world), {"before": cursor}).status_code == 400
    for name in ("runs", "deliveries", "workers", "audit"):
        response = client.get(reverse(f"dashboard:{name}"), {"before": cursor})
        assert response.status_code == 400, (name, cursor)


def test_it_answers_400_for_both_cursors_at_once(world):
    make_tasks(world.run, 70, partition="zeta.test", state="dead", host="zeta.test")
    client = logged_in(world, "admin")
    listing = _get(client, _tasks_url(world), {"size": "25"})
    cursor = listing.next_cursor
    response = client.get(_tasks_url(world), {"after": cursor, "before": cursor})
    assert response.status_code == 400


def test_the_count_is_exact_below_the_cap_and_bounded_above_it(world, monkeypatch):
    make_tasks(world.run, 30, partition="zeta.test", state="dead", host="zeta.test")
    client = logged_in(world, "operator")
    url = _tasks_url(world)
    total = Task.objects.filter(run=world.run).count()
    listing = _get(client, url, {})
    assert (listing.matching, listing.matching_capped) == (total, False)
    assert f"{total} matching" in client.get(url).content.decode()
    dead = _get(client, url, {"state": "dead"})
    assert (dead.matching, dead.matching_capped) == (30, False)

    monkeypatch.setattr(lists, "COUNT_CAP", 30)
    at_cap = _get(client, url, {"state": "dead"})
    assert (at_cap.matching, at_cap.matching_capped) == (30, False)
    monkeypatch.setattr(lists, "COUNT_CAP", 29)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, {"state": "dead"})
    assert "more than 29 matching" in response.content.decode()
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    (count,) = [sql for sql in counts if '"recovery_task"' in sql]
    assert "LIMIT 30" in count.upper()  # never more than cap + 1 rows read


def test_the_count_shows_thousands_separated(world, monkeypatch):
    listing = lists.Listing(
        spec=lists.TASKS, params=None, filterset=None, sort="url", matching=10_000
    )
    assert listing.matching_text == "10,000 matching"
    listing.matching_capped = True
    assert listing.matching_text == "more than 10,000 matching"


@pytest.mark.parametrize("name", ["run_tasks", "runs", "deliveries", "audit"])
def test_a_list_page_makes_as_many_queries_for_200_rows_as_for_a_few(world, name):
    client = logged_in(world, "admin")
    url = _tasks_url(world) if name == "run_tasks" else reverse(f"dashboard:{name}")

    def queries(params) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(url, params).status_code == 200
        return len(captured.captured_queries)

    few = queries({})
    _make_many(world)
    make_tasks(world.run, 150, partition="zeta.test", state="dead", host="zeta2.test")
    for _ in range(150):
        AuditEntry.objects.create(actor="adam", action="bulk", object_type="x", object_id="1")
    many = queries({"size": "200"})
    assert many == few
    listing = _get(client, url, {"size": "200"})
    back = queries(_params(listing.next_href)) if listing.next_href else few
    assert back == few
