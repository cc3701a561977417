"""Every link works: each role logs in and a small crawler walks every same-origin link it can
reach from the home page, on a world with a 2,400-task run made through the product's own
create_run, claim and commit paths.

For every page: no 5xx, no script error, no malformed href (`??`, an empty query key or value).
Each list's "export CSV" link is fetched too (a download, not a page): a CSV whose rows pass the
link's filters.
A pager's next page shows rows the previous page did not, and its "previous page" link shows
that page again; the pager's links (previous, page sizes) answer 200. A filter link shows only
rows that match it (rows carry their filterable values as data- attributes). Search finds a task
by URL prefix, by exact URL and by task key. Screenshots of the main pages at 1366 and 390 px
wide go to test-output/screenshots/ (the README's set is copied to docs/screenshots/).
"""

from __future__ import annotations

import re
from collections import Counter
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest
from playwright.sync_api import expect

from recovery import leases
from recovery.intake import manifests, schedules
from recovery.models import Run, Task
from recovery.outcomes import ErrorClass, Observed, Outcome
from tests.browser.test_dashboard_browser import log_in
from tests.support.list_csv import list_rows
from tests.support.world import make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BIG_RUN_TASKS = 2_400
HOSTS = ("alpha.test", "beta.test", "gamma.test", "delta.test")
# Query parameters that filter a list, and the data- attribute each row carries for it.
FILTERS = {
    "state": "state",
    "partition": "partition",
    "page_type": "page_type",
    "error_class": "error_class",
    "event_type": "event_type",
    "provider": "provider",
    "run": "run",
    "dataset": "dataset",
    "actor": "actor",
    "action": "action",
    "object_type": "object_type",
}
# Bounds on the walk that still cover every kind of page: at most PER_SHAPE pages per (path
# shape, query keys) and PER_PATH per path shape (/runs/N/tasks/ counts once for all runs).
PER_SHAPE = 2
PER_PATH = 8
MAX_PAGES = 100
# Every list page has exactly one search box.
LISTS = re.compile(
    r"^/(runs/|runs/\d+/tasks/|runs/\d+/quarantine/|reconcile/|deliveries/|workers/|audit/"
    r"|exports/|datasets/)$"
)
SKIP = re.compile(r"^/(admin/|accounts/logout|static/|exports/\d+\.\w+$)")


def make_big_run(tmp_path) -> Run:
    """2,400 tasks through createrun's code path; 400 of them claimed and committed through
    the workers' commit path (committed, quarantined, gone, retry), the rest pending."""
    manifest = tmp_path / "big.txt"
    manifest.write_text(
        "".join(f"http://{HOSTS[i % 4]}/item/{i:05d}\n" for i in range(BIG_RUN_TASKS))
    )
    run = manifests.create_run("shop", "2026-12-01", manifest).run
    claimed = leases.claim("crawl-worker", limit=400)
    outcomes = []
    for i, c in enumerate(claimed):
        if i % 10 == 7:
            outcomes.append(
                Outcome(http_status=200, error_class=ErrorClass.SELECTOR, error_detail="no h1")
            )
        elif i % 10 == 8:
            outcomes.append(Outcome(http_status=404, error_class=ErrorClass.NOT_FOUND))
        elif i % 10 == 9:
            outcomes.append(Outcome(http_status=503, error_class=ErrorClass.SERVER))
        else:
            outcomes.append(
                Outcome(http_status=200, observations=[Observed(c.url, {"title": f"item {i}"})])
            )
    leases.commit_outcomes("crawl-worker", claimed, outcomes)
    return run


@pytest.fixture
def world(transactional_db, tmp_path):
    users = make_users()
    w = make_world()
    w.users = users
    w.big = make_big_run(tmp_path)
    # A schedule, so the crawl reaches the Schedules page's edit and remove pages too.
    schedules.add(
        "shop",
        "nightly",
        recurrence=schedules.parse_recurrence(daily="06:00"),
        tz="Europe/London",
        window_format="%Y-%m-%d",
        source="previous",
        catch_up="latest",
        actor="test",
    )
    return w


def _rows(page) -> list[str]:
    return page.eval_on_selector_all(
        "[data-row]", "els => els.map(e => e.getAttribute('data-key') || e.innerText)"
    )


def _stable_rows(page) -> list[str]:
    """The rows as _rows reads them, each relative time ("5 s ago") read as its timestamp."""
    return page.eval_on_selector_all(
        "[data-row]",
        """els => els.map(e => {
            const row = e.cloneNode(true);
            for (const t of row.querySelectorAll('time')) t.textContent = t.dateTime;
            return e.getAttribute('data-key') || row.textContent;
        })""",
    )


def _check_href(href: str, where: str) -> None:
    assert "??" not in href, f"{where}: {href}"
    query = urlsplit(href).query
    for key, value in parse_qsl(query, keep_blank_values=True):
        assert key, f"{where}: empty query key in {href}"
        assert value != "", f"{where}: blank value for {key} in {href}"


def _check_filters(page, url: str) -> None:
    params = dict(parse_qsl(urlsplit(url).query))
    rows = page.locator("[data-row]")
    for name, attribute in FILTERS.items():
        if name not in params:
            continue
        values = rows.evaluate_all(f"els => els.map(e => e.getAttribute('data-{attribute}'))")
        present = [v for v in values if v is not None]
        assert all(v == params[name] for v in present), f"{url}: {name} rows {Counter(present)}"


def _check_export(page, url: str) -> int:
    """A list's CSV link: a download (the browser would save it) whose rows match its filters."""
    response = page.request.get(url)
    assert response.status == 200, f"{url} answered {response.status}"
    assert response.headers["content-type"].startswith("text/csv"), url
    assert response.headers["content-disposition"].startswith("attachment;"), url
    rows = list_rows(response.text())
    params = dict(parse_qsl(urlsplit(url).query))
    for name in ("state", "partition", "page_type", "error_class", "event_type", "run", "actor"):
        if name in params and rows and name in rows[0]:
            assert {r[name] for r in rows} == {params[name]}, f"{url}: {name}"
    return response.status


def crawl(page, base: str) -> dict[str, int]:
    """Breadth-first over same-origin links from the home page. Returns {url: status}."""
    seen: dict[str, int] = {}
    shapes: Counter = Counter()
    paths: Counter = Counter()
    pagers: Counter = Counter()
    previous_rows: dict[str, list[str]] = {}  # next-page URL -> rows of the page linking it
    back_rows: dict[str, list[str]] = {}  # a next page's previous-page URL -> rows expected
    previous_stable: dict[str, list[str]] = {}  # as previous_rows, times read as timestamps
    queue = [base + "/"]
    while queue and len(seen) < MAX_PAGES:
        url = queue.pop(0)
        if url in seen:
            continue
        if urlsplit(url).path.endswith(".csv"):
            seen[url] = _check_export(page, url)
            continue
        response = page.goto(url)
        status = response.status if response else 0
        seen[url] = status
        assert status < 500, f"{url} answered {status}"
        if not page.url.startswith(base):
            continue
        rows = _rows(page)
        if previous_rows.get(url):
            assert rows, f"{url}: a next page with no rows"
            assert not set(rows) & set(previous_rows[url]), f"{url}: next page repeats rows"
            # Its "previous page" link (keyset backwards, issue 29) shows the page we came from.
            prev_link = page.locator("a[rel=prev]")
            assert prev_link.count(), f"{url}: a next page without a previous-page link"
            back = urljoin(page.url, prev_link.first.get_attribute("href"))
            if back not in seen:
                back_rows[back] = previous_stable[url]
                queue.insert(0, back)
        if url in back_rows:
            assert _stable_rows(page) == back_rows[url], f"{url}: not the page before"
        _check_filters(page, page.url)
        if status == 200 and LISTS.match(urlsplit(page.url).path):
            assert page.locator("input[name=q]").count() == 1, f"{page.url}: one search box"
        hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
        for href in hrefs:
            _check_href(href, page.url)
            target = urljoin(page.url, href).split("#")[0]
            parts = urlsplit(target)
            if not target.startswith(base) or SKIP.search(parts.path):
                continue
            if target in seen or target in queue or "after=" in parts.query:
                continue  # next pages are followed below, first, for every list
            path = re.sub(r"\d+", "N", parts.path)
            shape = (path, tuple(sorted(k for k, _ in parse_qsl(parts.query))))
            if shapes[shape] >= PER_SHAPE or paths[path] >= PER_PATH:
                continue
            shapes[shape] += 1
            paths[path] += 1
            queue.append(target)
        next_link = page.locator("a[rel=next]")
        if next_link.count():
            target = urljoin(page.url, next_link.first.get_attribute("href"))
            path = re.sub(r"\d+", "N", urlsplit(target).path)
            previous_rows[target] = rows
            previous_stable[target] = _stable_rows(page)
            if target not in seen and pagers[path] < PER_SHAPE:
                pagers[path] += 1
                queue.insert(0, target)
    return seen


@pytest.mark.parametrize("role", ["olivia", "adam", "erin"])
def test_every_link_a_role_can_reach_works(world, live_server, page, role):
    log_in(page, live_server, role)
    seen = crawl(page, live_server.url)
    statuses = Counter(seen.values())
    assert statuses[200] >= (3 if role == "erin" else 25), statuses
    # The pager's own links (previous page, page sizes; issue 29) are all usable.
    paged = [u for u in seen if re.search(r"[?&](before|size)=", u)]
    assert all(seen[u] == 200 for u in paged), {u: seen[u] for u in paged if seen[u] != 200}
    if role != "erin":
        # The big run's task list, a page further on, and filtered views were all reached.
        big_tasks = f"/runs/{world.big.pk}/tasks/"
        assert any(urlsplit(u).path == big_tasks and "after=" in u for u in seen), sorted(seen)
        assert any("state=" in u for u in seen)
        assert any("partition=" in u for u in seen)
        # Each list's export link was followed and answered a CSV.
        exported = {urlsplit(u).path for u in seen if urlsplit(u).path.endswith(".csv")}
        assert any(re.fullmatch(r"/runs/\d+/tasks\.csv", p) for p in exported), sorted(exported)
        assert {"/runs.csv", "/reconcile.csv", "/deliveries.csv", "/workers.csv"} <= exported
    else:
        assert "/exports.csv" in {urlsplit(u).path for u in seen}


def test_search_finds_tasks_and_main_pages_fit_1366_and_390_px(
    world, live_server, page, screenshot
):
    """One world for both (a 2,400-task world costs seconds to build)."""
    log_in(page, live_server, "adam")
    tasks_url = f"{live_server.url}/runs/{world.big.pk}/tasks/"
    page.goto(tasks_url)
    box = page.locator("input[name=q]")

    box.fill("gamma.test/item/0010")  # no scheme: http:// and https:// are both tried
    box.press("Enter")
    page.wait_for_url(re.compile(r"q=gamma"))
    urls = page.locator("#tasks td.url").all_inner_texts()
    assert urls and all(u.startswith("http://gamma.test/item/0010") for u in urls)
    assert len(urls) == len([i for i in range(100, 110) if i % 4 == 2])

    target = Task.objects.filter(run=world.big, url="http://delta.test/item/02003").get()
    page.locator("input[name=q]").fill(target.url)
    page.locator("input[name=q]").press("Enter")
    page.wait_for_url(re.compile(rf"/tasks/{target.pk}/$"))
    expect(page.locator("h1")).to_have_text(f"Task #{target.pk}")

    page.goto(f"{live_server.url}/runs/")
    page.locator("input[name=q]").fill(target.task_key)
    page.locator("input[name=q]").press("Enter")
    page.wait_for_url(re.compile(rf"/tasks/{target.pk}/$"))
    expect(page.locator("dd.url")).to_have_text(target.url)

    main_pages_fit(world, live_server, page, screenshot)


MAIN_PAGES = {
    "runs": "/runs/",
    "run-detail": "/runs/{big}/",
    "run-tasks": "/runs/{big}/tasks/",
    "quarantine": "/runs/{run}/quarantine/",
    "reconcile": "/reconcile/",
    "deliveries": "/deliveries/",
    "workers": "/workers/",
    "audit": "/audit/",
    "task": "/tasks/{task}/",
    "not-found": "/runs/999999/",
}


def main_pages_fit(world, live_server, page, screenshot) -> None:
    values = {"big": world.big.pk, "run": world.run.pk, "task": world.quarantined_task.pk}
    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in MAIN_PAGES.items():
            page.goto(live_server.url + path.format(**values))
            # The page never scrolls sideways; wide tables scroll inside their own box.
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, f"{name} at {width}px overflows by {overflow}px"
            screenshot(page, f"{name}-{width}")
