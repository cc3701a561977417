"""Two `manage.py work` processes share one host's Crawl-delay (recovery.fetch.hostslots)
and its `per_host` (recovery.fetch.hostseats).

Issue 30: each worker spaced its own requests, so two workers hit a host twice as often as its
Crawl-delay allowed. Here two real worker processes crawl one sandbox host whose robots.txt
says `Crawl-delay: 1`; the sandbox's own request log (arrival times) must show no two
requests less than a second apart, robots.txt read once for both, and both workers at work.
Likewise each worker bounded its own requests in flight, so two workers with `per_host = 1`
had two at once at the host: the sandbox's count of requests in flight must never pass one.
"""

from __future__ import annotations

import itertools

import pytest

from recovery.models import Attempt, Task
from recovery.sandbox import inflight
from recovery.sandbox import robots as sandbox_robots
from tests.support.direct import create_run, load_shop
from tests.support.engine_procs import Procs, all_terminal, log_text, wait_exit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PAGES = 10


def start_workers(procs: Procs, batch: int) -> list:
    # Small batches, so that both workers hold some of the host's pages at once.
    return [
        procs.manage(
            f"w{n}",
            "work",
            "--until-idle",
            "--idle-wait",
            "4",
            "--batch",
            str(batch),
            "--worker-id",
            f"w{n}",
        )
        for n in (1, 2)
    ]


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_two_workers_never_ask_a_crawl_delay_host_more_than_once_a_second(
    make_sandbox, procs, tmp_path
):
    shop = make_sandbox(pages=PAGES, faults="none", robots_txt="User-agent: *\nCrawl-delay: 1\n")
    load_shop("sharedpace", max_attempts=1)
    run = create_run(
        "sharedpace", [(shop.product_url(i), "product") for i in range(1, PAGES + 1)], tmp_path
    )
    workers = start_workers(procs, batch=3)
    for proc in workers:
        assert wait_exit(proc, 180, "a worker") == 0, log_text(proc)[-3000:]

    assert all_terminal(run.pk)
    tasks = Task.objects.filter(run=run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    # Waiting for the host's turn is a deferral: one counted attempt per page.
    assert {t.attempt_count - t.deferred_count for t in tasks} == {1}
    # Both workers worked on the host's pages.
    assert set(Attempt.objects.filter(run=run).values_list("worker", flat=True)) == {"w1", "w2"}

    log = list(shop.served._runner.app[sandbox_robots.REQUEST_TIMES])
    paths = [path for _t, path in log]
    assert paths.count("/robots.txt") == 1  # one read served both workers
    assert sorted(p for p in paths if p.startswith("/product/")) == sorted(
        f"/product/{i}" for i in range(1, PAGES + 1)
    )
    times = [t for t, _path in log]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.95, [(round(g, 3), p) for g, p in zip(gaps, paths[1:], strict=True)]


def test_two_workers_never_have_more_than_per_host_requests_in_flight_at_one_host(
    make_sandbox, procs, tmp_path
):
    pages = 12
    # Each page answers after 0.3 s, so two workers' requests would overlap if they could.
    shop = make_sandbox(pages=pages, faults="none", hold_seconds=0.3)
    load_shop("sharedseats", max_attempts=1, provider_options={"per_host": 1})
    run = create_run(
        "sharedseats", [(shop.product_url(i), "product") for i in range(1, pages + 1)], tmp_path
    )
    workers = start_workers(procs, batch=4)
    for proc in workers:
        assert wait_exit(proc, 180, "a worker") == 0, log_text(proc)[-3000:]

    assert all_terminal(run.pk)
    tasks = Task.objects.filter(run=run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    # Waiting for a seat past SALVAGE_POLITENESS_WAIT is a deferral: one counted attempt each.
    assert {t.attempt_count - t.deferred_count for t in tasks} == {1}
    assert set(Attempt.objects.filter(run=run).values_list("worker", flat=True)) == {"w1", "w2"}

    app = shop.served._runner.app
    paths = list(app[sandbox_robots.REQUESTS])
    assert sorted(p for p in paths if p.startswith("/product/")) == sorted(
        f"/product/{i}" for i in range(1, pages + 1)
    )
    host = shop.base_url.removeprefix("http://")
    assert app[inflight.MAX_IN_FLIGHT] == {host: 1}
