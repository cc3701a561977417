"""robots.txt against the sandbox over real sockets: the server's own request log is the proof.

The sandbox serves the rules given to it at /robots.txt and logs every path it was asked for
(recovery.sandbox.robots), so "never fetched" is what the server saw, not what the client says.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from recovery import worker
from recovery.models import Attempt, AuditEntry, Task
from recovery.outcomes import ErrorClass, TaskInput
from recovery.providers.direct import DirectProvider
from recovery.sandbox import robots as sandbox_robots
from recovery.sandbox import server
from tests.support.direct import create_run, load_shop, shop_spec

RULES = """# the shop's rules for this test
User-agent: *
Disallow: /product/1
Allow: /product/1$
Disallow: /product/2
Crawl-delay: 0.25

User-agent: OtherBot
Disallow: /
"""
# /product/1 itself is allowed (Allow ... $ is longer than Disallow /product/1), but
# /product/1x (10-19) is not; /product/2 and 20-29 are refused; the rest are allowed.


def refused(i: int) -> bool:
    s = str(i)
    return (s.startswith("1") and s != "1") or s.startswith("2")


def task_input(url: str, spec: dict, run_id: int = 1) -> TaskInput:
    return TaskInput(
        task_id=1,
        task_key="k",
        run_id=run_id,
        url=url,
        page_type="product",
        partition="p",
        window="w",
        dataset="shop",
        attempt_count=1,
        lease_token=1,
        spec=spec,
    )


def execute(inputs: list[TaskInput], **options):
    spec = inputs[0].spec

    async def go():
        provider = DirectProvider(**{**spec["provider_options"], **options})
        try:
            return await provider.execute_many(inputs), provider
        finally:
            await provider.aclose()

    return asyncio.run(go())


def requests_of(shop) -> list[str]:
    return list(shop.served._runner.app[sandbox_robots.REQUESTS])


def products_requested(shop) -> set[int]:
    return {int(p.rsplit("/", 1)[1]) for p in requests_of(shop) if p.startswith("/product/")}


def test_it_never_fetches_a_disallowed_url_and_keeps_the_crawl_delay(make_sandbox):
    shop = make_sandbox(pages=30, faults="none", robots_txt=RULES)
    spec = shop_spec()
    pages = range(1, 31)
    started = time.monotonic()
    outcomes, provider = execute([task_input(shop.product_url(i), spec) for i in pages])
    elapsed = time.monotonic() - started

    for i, outcome in zip(pages, outcomes, strict=True):
        if refused(i):
            assert outcome.error_class == ErrorClass.ROBOTS_DISALLOWED, i
            assert "disallowed by" in outcome.error_detail
        else:
            assert outcome.ok, (i, outcome.error_detail)
    allowed = {i for i in pages if not refused(i)}
    assert products_requested(shop) == allowed  # the server never saw a refused path
    assert requests_of(shop).count("/robots.txt") == 1  # cached for the run
    # Crawl-delay 0.25 s raised the host's spacing: 1 robots.txt + len(allowed) pages, in turn.
    gate = provider.fetcher.gate(shop.base_url.removeprefix("http://"))
    assert gate.min_delay == pytest.approx(0.25)
    assert elapsed >= 0.25 * (len(allowed) - 1)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_an_unreachable_robots_txt_defers_its_pages_and_fetches_nothing(
    make_sandbox, settings, status
):
    settings.SALVAGE_ROBOTS_RETRY_BASE = 40.0
    shop = make_sandbox(pages=3, faults="none", robots_txt=status)
    outcomes, _ = execute([task_input(shop.product_url(i), shop_spec()) for i in (1, 2, 3)])
    # Deferred, not failed (RFC 9309 2.3.1.3): back to retry_wait until robots.txt's own
    # back-off ends, spending no attempt.
    assert {o.error_class for o in outcomes} == {ErrorClass.ROBOTS_UNREACHABLE}
    assert all(o.deferred for o in outcomes)
    assert all(35 <= o.retry_after <= 40 for o in outcomes)
    assert all(f"robots.txt unreachable (HTTP {status})" in o.error_detail for o in outcomes)
    assert products_requested(shop) == set()
    assert requests_of(shop).count("/robots.txt") == 1  # not asked again during the back-off


@pytest.mark.parametrize("status", [404, 403, 410])
def test_a_4xx_robots_txt_allows_everything(make_sandbox, status):
    shop = make_sandbox(pages=3, faults="none", robots_txt=status)
    outcomes, _ = execute([task_input(shop.product_url(i), shop_spec()) for i in (1, 2, 3)])
    assert all(o.ok for o in outcomes)
    assert products_requested(shop) == {1, 2, 3}


def test_a_redirected_robots_txt_is_followed_and_its_rules_apply(make_sandbox):
    shop = make_sandbox(
        pages=3,
        faults="none",
        robots_txt="redirect:/policies/robots",
        robots_redirect_text="User-agent: *\nDisallow: /product/2\n",
    )
    outcomes, _ = execute([task_input(shop.product_url(i), shop_spec()) for i in (1, 2, 3)])
    assert [o.error_class for o in outcomes] == [None, ErrorClass.ROBOTS_DISALLOWED, None]
    assert products_requested(shop) == {1, 3}
    assert "/policies/robots" in requests_of(shop)


def test_the_default_sandbox_allows_everything():
    app = server.build_app(pages=5, simulators={})
    assert app[sandbox_robots.ROBOTS] == sandbox_robots.ALLOW_ALL


@pytest.mark.django_db(transaction=True)
def test_refusals_end_quarantined_as_robots_disallowed_through_the_engine(make_sandbox, tmp_path):
    shop = make_sandbox(pages=12, faults="none", robots_txt="User-agent: *\nDisallow: /product/1\n")
    load_shop("robotshop")
    run = create_run(
        "robotshop", [(shop.product_url(i), "product") for i in range(1, 13)], tmp_path
    )
    worker.run_until_idle("robots-test", idle_wait=2.0)

    tasks = {t.url: t for t in Task.objects.filter(run=run)}
    for i in range(1, 13):
        task = tasks[shop.product_url(i)]
        if str(i).startswith("1"):  # 1, 10, 11, 12
            assert task.state == "quarantined", i
            assert task.last_error_class == "robots_disallowed"
        else:
            assert task.state == "committed", (i, task.last_error_class)
    assert products_requested(shop) == {i for i in range(2, 10)}
    attempt = Attempt.objects.filter(run=run, error_class="robots_disallowed").first()
    assert attempt is not None and "robots.txt" in attempt.artefact["reason"]


@pytest.mark.django_db(transaction=True)
def test_an_opt_out_with_a_reason_is_audited_and_fetches_everything(make_sandbox, tmp_path):
    shop = make_sandbox(pages=3, faults="none", robots_txt="User-agent: *\nDisallow: /\n")
    reason = "written permission from the shop's owner, ticket 42"
    dataset = load_shop("optout", robots={"obey": False, "reason": reason})
    entry = AuditEntry.objects.get(action="robots_opt_out", object_id=str(dataset.pk))
    assert entry.reason == reason

    run = create_run("optout", [(shop.product_url(i), "product") for i in (1, 2, 3)], tmp_path)
    worker.run_until_idle("robots-optout", idle_wait=2.0)
    assert set(Task.objects.filter(run=run).values_list("state", flat=True)) == {"committed"}
    assert products_requested(shop) == {1, 2, 3}
    # Read once all the same: an opt-out from the rules keeps the site's Crawl-delay.
    assert requests_of(shop).count("/robots.txt") == 1


def test_the_browser_provider_refuses_the_same_urls_without_opening_a_page(make_sandbox):
    from recovery.providers.browser import BrowserProvider

    shop = make_sandbox(pages=3, faults="none", robots_txt="User-agent: *\nDisallow: /product/2\n")
    spec = {**shop_spec(), "provider": "browser"}

    async def go():
        provider = BrowserProvider()
        try:
            return await provider.execute(task_input(shop.product_url(2), spec))
        finally:
            await provider.robots.fetcher.aclose()

    outcome = asyncio.run(go())
    assert outcome.error_class == ErrorClass.ROBOTS_DISALLOWED
    assert requests_of(shop) == ["/robots.txt"]  # and not the page
