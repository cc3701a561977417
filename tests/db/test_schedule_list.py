"""The Schedules page as a keyset list (dashboard.lists.SCHEDULES, issue 29): every schedule on
exactly one page however many there are, filters, search and sorts kept across pages, the CSV
holding exactly the pages' rows and no manifest source or credential, the attention page's link
listing exactly the overdue schedules, and the bulk pause/resume going back to the filtered list.
Runs on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import time, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from recovery import attention
from recovery.intake import recurrence
from recovery.models import Schedule
from tests.support.factories import make_dataset
from tests.support.list_csv import list_rows
from tests.support.world import make_users

pytestmark = pytest.mark.django_db

LIST = "/schedules/"
CSV = "/schedules.csv"


@pytest.fixture
def users(db):
    return make_users()


def _client(users, role: str = "operator") -> Client:
    client = Client()
    client.force_login(users[role])
    return client


def _schedules(datasets: int, each: int, **fields) -> list[Schedule]:
    """`each` schedules in each of `datasets` datasets, caught up (not overdue); names repeat
    across datasets (a tie the name sort breaks by id). Letters and digits only, so Python's
    order is the database's whatever its collation."""
    made = []
    created = timezone.now() - timedelta(days=2)
    for d in range(datasets):
        dataset = make_dataset(name=f"ds{d:02d}")
        made += [
            Schedule(
                dataset=dataset,
                name=f"s{i:02d}",
                kind="daily",
                at_time=time(6, 0),
                manifest_source="previous",
                created_at=created,
                **fields,
            )
            for i in range(each)
        ]
    Schedule.objects.bulk_create(made)
    made = list(Schedule.objects.select_related("dataset").order_by("pk"))
    for schedule in made:
        _caught_up(schedule)
    return made


def _caught_up(schedule: Schedule) -> None:
    """What the dispatcher leaves behind once it made the newest due window's run."""
    now = timezone.now()
    instant = list(recurrence.occurrences(schedule, schedule.created_at, now))[-1]
    Schedule.objects.filter(pk=schedule.pk).update(
        last_due_at=instant, last_window=recurrence.window_for(schedule, instant)
    )


def _pages(client: Client, params: dict) -> tuple[list[list[int]], list]:
    """Each page's schedule ids, following the page's own next links, and the last listing."""
    pages = []
    while True:
        response = client.get(LIST, params)
        assert response.status_code == 200, response.content[:300]
        listing = response.context["listing"]
        ids = [s.pk for s in listing.rows]
        # What each row shows (windows, overdue) is worked out for this page's rows only.
        assert [row["schedule"].pk for row in response.context["rows"]] == ids
        pages.append(ids)
        if not listing.next_href:
            return pages, listing
        params = {k: v[0] for k, v in parse_qs(urlsplit(listing.next_href).query).items()}


def _shown(client: Client, params: dict) -> list[int]:
    pages, _ = _pages(client, params)
    return [pk for page in pages for pk in page]


def _csv(client: Client, params: dict) -> list[dict]:
    response = client.get(CSV, params)
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/csv")
    return list_rows(b"".join(response.streaming_content))


def test_it_pages_past_500_with_every_schedule_exactly_once_and_exports_the_same_rows(users):
    made = _schedules(13, 40)  # 520: the page used to stop at 500, silently
    client = _client(users)
    pages, last = _pages(client, {})
    assert len(pages) == 11 and all(len(page) == 50 for page in pages[:-1])
    shown = [pk for page in pages for pk in page]
    expected = [s.pk for s in sorted(made, key=lambda s: (s.dataset.name, s.name))]
    assert shown == expected  # each once, by dataset then schedule name

    rows = _csv(client, {})
    assert [int(row["schedule"]) for row in rows] == shown
    assert {row["dataset"] for row in rows} == {f"ds{d:02d}" for d in range(13)}
    assert last.export_href == CSV


@pytest.mark.parametrize(
    "sort, key",
    [
        ("dataset", lambda s: (s.dataset.name, s.name)),
        ("-dataset", lambda s: (s.dataset.name, s.name)),
        ("name", lambda s: (s.name, s.pk)),
        ("-name", lambda s: (s.name, s.pk)),
        ("id", lambda s: s.pk),
        ("-id", lambda s: s.pk),
    ],
)
def test_each_sort_walks_every_schedule_once_in_its_order(users, sort, key):
    made = _schedules(3, 45)  # three pages; each name in three datasets
    client = _client(users)
    shown = _shown(client, {"sort": sort})
    expected = [s.pk for s in sorted(made, key=key, reverse=sort.startswith("-"))]
    assert shown == expected
    assert [int(row["schedule"]) for row in _csv(client, {"sort": sort})] == expected


def test_filters_and_search_select_their_schedules_and_are_kept_across_pages(users):
    made = _schedules(4, 60)
    # Paused: 30 of ds01's, so a filtered list still has a second page.
    paused = [s for s in made if s.dataset.name == "ds01" and s.name < "s30"]
    Schedule.objects.filter(pk__in=[s.pk for s in paused]).update(paused=True)
    other = make_dataset(name="north")
    Schedule.objects.create(
        dataset=other, name="s99", kind="daily", at_time=time(6), manifest_source="previous"
    )
    client = _client(users)

    def ids(keep):
        return {s.pk for s in made if keep(s)}

    cases = [
        ({"dataset": "ds02"}, ids(lambda s: s.dataset.name == "ds02")),
        ({"paused": "yes"}, {s.pk for s in paused}),
        (
            {"paused": "no", "dataset": "ds01"},
            ids(lambda s: s.dataset.name == "ds01") - ids(lambda s: s in paused),
        ),
        # The beginning of a dataset's name...
        ({"q": "ds0"}, ids(lambda s: True)),
        ({"q": "ds03"}, ids(lambda s: s.dataset.name == "ds03")),
        # ... or of a schedule's name, in any dataset.
        ({"q": "s5"}, ids(lambda s: s.name.startswith("s5"))),
        ({"q": "s99"}, set(Schedule.objects.filter(dataset=other).values_list("pk", flat=True))),
        ({"q": "no"}, set(Schedule.objects.filter(dataset=other).values_list("pk", flat=True))),
        (
            {"q": "s5", "dataset": "ds00", "sort": "-name"},
            ids(lambda s: s.dataset.name == "ds00" and s.name.startswith("s5")),
        ),
        ({"q": "zzz"}, set()),
        ({"dataset": "nowhere"}, set()),
    ]
    for params, expected in cases:
        pages, _ = _pages(client, params)
        shown = [pk for page in pages for pk in page]
        assert len(shown) == len(set(shown)), params
        assert set(shown) == expected, params
        assert [int(row["schedule"]) for row in _csv(client, params)] == shown, params
        if len(pages) > 1:
            # The next link carries every filter, the search and the sort.
            listing = client.get(LIST, params).context["listing"]
            kept = parse_qs(urlsplit(listing.next_href).query)
            assert {k: v[0] for k, v in kept.items() if k != "after"} == params


def test_it_refuses_what_it_cannot_use_with_400(users):
    _schedules(1, 2)
    client = _client(users)
    assert client.get(LIST, {"sort": "next_window"}).status_code == 400
    assert client.get(LIST, {"paused": "maybe"}).status_code == 400
    assert client.get(LIST, {"after": "not a cursor"}).status_code == 400
    assert client.get(CSV, {"paused": "maybe"}).status_code == 400


def test_the_attention_link_lists_exactly_the_overdue_schedules(users):
    made = _schedules(2, 40)
    # 55 overdue (never dispatched since they were made two days ago): more than a page.
    late = made[:55]
    Schedule.objects.filter(pk__in=[s.pk for s in late]).update(last_due_at=None, last_window="")
    Schedule.objects.filter(pk=late[0].pk).update(paused=True)  # paused: never overdue
    client = _client(users)
    overdue = [s.pk for s, _at, _window in attention.overdue_schedules()]
    assert set(overdue) == {s.pk for s in late[1:]}

    params = {"needs": attention.OVERDUE_SCHEDULES}
    pages, _ = _pages(client, params)
    shown = [pk for page in pages for pk in page]
    assert len(pages) == 2
    assert sorted(shown) == sorted(overdue)
    # Each row on those pages says it is overdue.
    response = client.get(LIST, params)
    assert all(row["overdue"] for row in response.context["rows"])
    assert 'id="schedules-overdue"' in response.content.decode()
    assert [int(row["schedule"]) for row in _csv(client, params)] == shown

    # The attention page links there, and names each overdue schedule on the filtered list.
    page = client.get(reverse("dashboard:attention")).content.decode()
    assert "/schedules/?needs=overdue_schedules" in page
    assert f"/schedules/?needs=overdue_schedules#schedule-{late[1].pk}" in page


def test_neither_the_page_nor_the_csv_shows_a_manifest_credential(users):
    dataset = make_dataset(name="shop")
    source = "https://robot:hunter2@feeds.example/m.csv?token=s3cr3t"
    Schedule.objects.create(
        dataset=dataset,
        name="nightly",
        kind="daily",
        at_time=time(6),
        manifest_source=f"sitemap:{source}",
        last_error=f"2026-12-01: {source}: HTTP 503",
        failures=1,
    )
    client = _client(users)
    page = client.get(LIST).content.decode()
    assert "feeds.example/m.csv" in page  # where the manifest comes from, and the error
    assert "HTTP 503" in page
    body = b"".join(client.get(CSV).streaming_content).decode()
    for secret in ("hunter2", "robot", "s3cr3t", "token="):
        assert secret not in page
        assert secret not in body
    row = list_rows(body)[0]
    assert "manifest_source" not in row and "manifest" not in row
    assert row["last_error"] == "2026-12-01: https://feeds.example/m.csv: HTTP 503"


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_bulk_pause_and_resume_go_back_to_the_filtered_list(users, action):
    made = _schedules(2, 60)
    if action == "resume":
        Schedule.objects.update(paused=True)
    chosen = [s.pk for s in made if s.dataset.name == "ds01"][:3]
    client = _client(users, "admin")
    query = "dataset=ds01&sort=-name&q=s&after=%5B%22s40%22%2C999999%5D"
    data = {"action": action, "pk": chosen, "query": query}

    # The confirmation page, then the confirmed POST: both lead back with the list's query.
    shown = client.post(reverse("dashboard:schedules_bulk"), data)
    assert shown.status_code == 200
    assert shown.context["shown"].back == f"{LIST}?{query}"
    done = client.post(
        reverse("dashboard:schedules_bulk"), {**data, "expected": "3", "confirmed": "1"}
    )
    assert done.status_code == 302
    assert done["Location"] == f"{LIST}?{query}"
    assert set(Schedule.objects.filter(pk__in=chosen).values_list("paused", flat=True)) == {
        action == "pause"
    }
    # The list it goes back to opens with those filters.
    assert client.get(done["Location"]).status_code == 200


def test_a_schedule_changed_from_a_late_page_is_shown_on_the_list_it_goes_back_to(users):
    made = _schedules(12, 50)
    last = max(made, key=lambda s: (s.dataset.name, s.name))
    client = _client(users, "admin")
    response = client.post(reverse("dashboard:schedule_toggle", args=[last.pk]))
    assert response.status_code == 302
    target = response["Location"]
    assert target == f"{LIST}?dataset=ds11#schedule-{last.pk}"
    listed = client.get(target.split("#")[0]).context["listing"].rows
    assert last.pk in [s.pk for s in listed]
