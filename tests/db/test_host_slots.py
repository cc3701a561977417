"""A host's politeness turns, shared by every worker (recovery.fetch.hostslots).

The turns come from one HostSlot row per host and one UPDATE ... RETURNING each, judged by the
database clock; a page whose turn is further away than SALVAGE_POLITENESS_WAIT is deferred
(back to retry_wait, no attempt counted) instead of holding its batch. On SQLite and
PostgreSQL; the sandbox's request log (arrival times) is the witness.
"""

from __future__ import annotations

import itertools

import pytest

from recovery import worker
from recovery.fetch import hostslots
from recovery.models import Attempt, HostSlot, Task
from recovery.sandbox import robots as sandbox_robots
from tests.support.direct import create_run, load_shop

CRAWL_DELAY_1S = "User-agent: *\nCrawl-delay: 1\n"


def request_times(shop, prefix: str = "/") -> list[float]:
    log = shop.served._runner.app[sandbox_robots.REQUEST_TIMES]
    return [t for t, path in list(log) if path.startswith(prefix)]


@pytest.mark.django_db
def test_it_grants_turns_one_spacing_apart_and_defers_past_the_horizon():
    host = "shop.test:80"
    granted = [hostslots.take_now(host, 1.0, 1.5) for _ in range(2)]
    assert [g for g, _ in granted] == [True, True]
    assert granted[0][1] == pytest.approx(0.0, abs=0.05)
    # The next turn, one spacing later (and its margin: hostslots.margin)
    step = 1.0 + hostslots.margin(1.0)
    assert granted[1][1] == pytest.approx(step, abs=0.03)
    # The third turn is 2 s away, past a 1.5 s horizon: deferred, one spacing apart each, and
    # the deferrals take no turn (the next request still goes at +2 s).
    deferred = [hostslots.take_now(host, 1.0, 1.5) for _ in range(3)]
    assert [g for g, _ in deferred] == [False, False, False]
    assert [w for _, w in deferred] == pytest.approx([2 * step, 3 * step, 4 * step], abs=0.05)
    assert HostSlot.objects.get(host=host).next_free - HostSlot.objects.get(host=host).tail < 0
    # A request that may not be deferred (robots.txt, a redirect hop) is always granted.
    always, wait = hostslots.take_now(host, 1.0, None)
    assert always is True and wait == pytest.approx(2 * step, abs=0.03)
    # A request made outside a turn pushes the next turn one spacing from now.
    hostslots.note_now("other.test", 5.0)
    later = 5.0 + hostslots.margin(5.0)
    assert hostslots.take_now("other.test", 5.0, None)[1] == pytest.approx(later, abs=0.03)
    # Hosts are independent.
    assert hostslots.take_now("third.test", 1.0, 1.0) == (True, pytest.approx(0.0, abs=0.05))


@pytest.mark.django_db(transaction=True)
def test_a_crawl_delay_host_does_not_hold_up_another_hosts_pages_in_the_same_batch(
    make_sandbox, tmp_path
):
    slow = make_sandbox(pages=8, faults="none", robots_txt=CRAWL_DELAY_1S)
    fast = make_sandbox(pages=8, faults="none")
    load_shop("twohosts", max_attempts=1)
    rows = [(shop.product_url(i), "product") for i in range(1, 9) for shop in (slow, fast)]
    run = create_run("twohosts", rows, tmp_path)

    # One worker, one batch holding every page of both hosts.
    worker.run_until_idle("two-hosts", batch_size=50, idle_wait=3.0)

    tasks = Task.objects.filter(run=run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    committed = dict(
        Attempt.objects.filter(run=run, outcome="committed").values_list("task__url", "finished_at")
    )
    started = min(Attempt.objects.filter(run=run).values_list("started_at", flat=True))
    fast_done = max(committed[fast.product_url(i)] for i in range(1, 9))
    slow_done = max(committed[slow.product_url(i)] for i in range(1, 9))
    # The fast host's pages were committed with the first batch, not after the slow host's
    # eight turns (one a second: robots.txt, then eight pages).
    assert (fast_done - started).total_seconds() < 3.0
    assert (slow_done - started).total_seconds() >= 7.0
    # The slow host's pages waited as deferrals, not attempts: one counted attempt each.
    for task in tasks.filter(url__startswith=slow.base_url):
        assert task.attempt_count - task.deferred_count == 1
    assert Attempt.objects.filter(run=run, outcome="deferred").exists()
    assert not Attempt.objects.filter(
        run=run, outcome="deferred", task__url__startswith=fast.base_url
    ).exists()
    # And the slow host was never asked twice within its Crawl-delay (robots.txt included).
    times = request_times(slow)
    assert len(times) == 9
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.95
