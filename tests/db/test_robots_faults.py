"""An unreachable robots.txt (5xx, 429, network) defers its host's pages; it never spends them.

Issue 30: one 503 on robots.txt was remembered for 30 s while the pages' 5 attempts were spent
in 14 s, so every page ended dead and robots.txt was never asked again. Now robots.txt has its
own back-off (recovery.fetch.robots_state), the pages wait for it in retry_wait as deferrals
(Outcome.deferred: an Attempt "deferred", no budget spent), and only a robots.txt unreachable
past its bound ends them, as robots_unreachable. The sandbox's request log is the witness.
"""

from __future__ import annotations

import itertools

import pytest
from django.test import Client
from django.urls import reverse

from recovery import worker
from recovery.fetch import robots_state
from recovery.models import Attempt, RobotsState, Task
from recovery.sandbox import robots as sandbox_robots
from tests.support.direct import create_run, load_shop
from tests.support.world import make_users

PAGES = 6


def robots_requests(shop) -> list[float]:
    log = shop.served._runner.app[sandbox_robots.REQUEST_TIMES]
    return [t for t, path in list(log) if path == "/robots.txt"]


def products_requested(shop) -> list[str]:
    return [
        p for p in shop.served._runner.app[sandbox_robots.REQUESTS] if p.startswith("/product/")
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("failures", [1, 3])
def test_it_commits_every_page_after_robots_txt_answers_503_and_spends_no_budget(
    make_sandbox, tmp_path, settings, failures
):
    settings.SALVAGE_ROBOTS_RETRY_BASE = 0.3
    shop = make_sandbox(
        pages=PAGES, faults="none", robots_txt=[503] * failures + [sandbox_robots.ALLOW_ALL]
    )
    # One attempt each: any attempt a robots.txt fault spent would leave the page dead.
    load_shop(f"robotsfault{failures}", max_attempts=1)
    run = create_run(
        f"robotsfault{failures}",
        [(shop.product_url(i), "product") for i in range(1, PAGES + 1)],
        tmp_path,
    )
    worker.run_until_idle(f"robots-fault-{failures}", idle_wait=5.0)

    tasks = list(Task.objects.filter(run=run))
    assert {t.state for t in tasks} == {"committed"}  # none dead
    for task in tasks:
        # Every claim before the rules were read was a deferral, not an attempt at the page.
        assert task.deferred_count >= 1
        assert task.attempt_count - task.deferred_count - task.crash_count == 1
        outcomes = list(
            Attempt.objects.filter(task=task)
            .order_by("started_at")
            .values_list("outcome", flat=True)
        )
        assert outcomes == ["deferred"] * task.deferred_count + ["committed"]
        deferred = Attempt.objects.filter(task=task, outcome="deferred")
        assert set(deferred.values_list("error_class", flat=True)) == {"robots_unreachable"}
        assert all("HTTP 503" in d for d in deferred.values_list("error_detail", flat=True))
        # The elapsed budget counts from the first attempt that counted.
        last_deferral = max(deferred.values_list("finished_at", flat=True))
        assert task.first_attempt_at >= last_deferral

    # robots.txt was asked again after its own back-off, growing: 0.3 s, 0.6 s, 1.2 s.
    times = robots_requests(shop)
    assert len(times) == failures + 1
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for n, gap in enumerate(gaps, start=1):
        assert gap >= 0.3 * 2 ** (n - 1) * 0.9, gaps
    # Each page fetched once, after the rules were read.
    assert sorted(products_requested(shop)) == sorted(f"/product/{i}" for i in range(1, PAGES + 1))

    state = RobotsState.objects.get(run=run)
    assert (state.state, state.status, state.failures, state.retry_at) == ("rules", 200, 0, None)
    assert state.digest == robots_state.digest(sandbox_robots.ALLOW_ALL.encode())

    client = Client()
    client.force_login(make_users()["admin"])
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert 'id="robots-table"' in html
    assert shop.base_url in html and state.digest in html


@pytest.mark.django_db(transaction=True)
def test_a_robots_txt_unreachable_past_its_bound_ends_its_pages_as_robots_unreachable(
    make_sandbox, tmp_path, settings
):
    settings.SALVAGE_ROBOTS_RETRY_BASE = 0.2
    settings.SALVAGE_ROBOTS_RETRY_CAP = 0.4
    settings.SALVAGE_ROBOTS_UNREACHABLE_LIMIT = 1.5
    shop = make_sandbox(pages=3, faults="none", robots_txt=503)
    load_shop("robotsgone", max_attempts=1)
    run = create_run("robotsgone", [(shop.product_url(i), "product") for i in (1, 2, 3)], tmp_path)
    worker.run_until_idle("robots-gone", idle_wait=3.0)

    tasks = list(Task.objects.filter(run=run))
    assert {(t.state, t.last_error_class) for t in tasks} == {("dead", "robots_unreachable")}
    for task in tasks:
        final = Attempt.objects.filter(task=task).order_by("-started_at").first()
        assert final.outcome == "dead"
        assert "robots.txt unreachable for" in final.error_detail
        assert task.deferred_count >= 1
    assert products_requested(shop) == []  # complete disallow, to the end
    state = RobotsState.objects.get(run=run)
    assert state.state == "given_up" and state.failures >= 3
    # Read again after each back-off (0.2, 0.4, 0.4, ...), never in between.
    times = robots_requests(shop)
    assert len(times) == state.failures
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.18


def test_its_back_off_doubles_is_capped_and_honours_retry_after(settings):
    settings.SALVAGE_ROBOTS_RETRY_BASE = 30.0
    settings.SALVAGE_ROBOTS_RETRY_CAP = 3600.0
    settings.SALVAGE_RETRY_AFTER_CAP = 3600
    assert [robots_state.backoff(n) for n in (1, 2, 3, 4)] == [30.0, 60.0, 120.0, 240.0]
    assert robots_state.backoff(10) == 3600.0
    assert robots_state.backoff(10_000) == 3600.0
    assert robots_state.backoff(1, retry_after=600.0) == 600.0  # the server's wish, when longer
    assert robots_state.backoff(3, retry_after=5.0) == 120.0
    assert robots_state.backoff(1, retry_after=99_999.0) == 3600.0  # capped as any Retry-After
