"""The direct provider against the sandbox shop over real sockets, alone and through the engine.

Expected outcomes come from the sandbox's own fault lookup (`expected(i)`), never hard-coded:
each misbehaving page kind must end in the class and state the retry table prescribes.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from recovery import worker
from recovery.models import Attempt, Observation, Task
from recovery.outcomes import ErrorClass, TaskInput
from recovery.providers import get_provider
from recovery.providers.direct import DirectProvider, classify_status, parse_options
from recovery.sandbox.site import KINDS, product_for
from tests.support.direct import create_run, load_shop, shop_spec

SPEC = shop_spec()
OPTIONS = SPEC["provider_options"]


def task_input(url: str, page_type: str = "product", **overrides) -> TaskInput:
    values = {
        "task_id": 1,
        "task_key": "k",
        "run_id": 1,
        "url": url,
        "page_type": page_type,
        "partition": "p",
        "window": "w",
        "dataset": "shop",
        "attempt_count": 1,
        "lease_token": 1,
        "spec": SPEC,
    }
    values.update(overrides)
    return TaskInput(**values)


def execute(inputs: list[TaskInput], **options):
    async def go():
        provider = DirectProvider(**{**OPTIONS, **options})
        try:
            return await provider.execute_many(inputs)
        finally:
            await provider.aclose()

    return asyncio.run(go())


# --- the provider alone -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_page_kind_gets_the_class_the_retry_table_expects(sandbox, kind):
    i = sandbox.products_with(kind)[0]
    expected = sandbox.expected(i)
    (outcome,) = execute([task_input(sandbox.product_url(i))])
    assert (outcome.error_class and str(outcome.error_class)) == expected.error_class, (
        kind,
        outcome.error_detail,
    )
    if outcome.ok:
        p = product_for(i, seed=sandbox.seed, pages=sandbox.pages)
        (obs,) = outcome.observations
        assert obs.entity_key == p.sku
        assert obs.payload == {
            "title": p.title,
            "price": f"{p.pence / 100:.2f}",
            "sku": p.sku,
            "in_stock": p.in_stock,
            "reviews": p.reviews,
            "retailer": p.retailer,
        }
    else:
        artefact = outcome.artefact
        assert artefact["reason"]
        assert outcome.error_detail


def test_a_200_that_fails_a_page_check_carries_an_artefact(sandbox):
    i = sandbox.products_with("consent")[0]
    (outcome,) = execute([task_input(sandbox.product_url(i))])
    assert outcome.error_class is ErrorClass.CONSENT
    assert outcome.http_status == 200
    assert outcome.observations == []
    artefact = outcome.artefact
    assert artefact["status"] == 200
    assert "consent marker present" in artefact["reason"]
    assert "We value your privacy" in artefact["body_excerpt"]
    assert len(artefact["body_excerpt"]) <= 2048
    assert artefact["headers"]["content-type"].startswith("text/html")


def test_a_selector_failure_names_the_field(sandbox):
    i = sandbox.products_with("price_na")[0]
    (outcome,) = execute([task_input(sandbox.product_url(i))])
    assert outcome.error_class is ErrorClass.SELECTOR
    assert "'price'" in outcome.artefact["reason"]
    assert "'N/A'" in outcome.artefact["reason"]


@pytest.mark.parametrize("kind", ["rate_limited", "rate_limited_date"])
def test_a_429_carries_retry_after_in_both_forms(sandbox, kind):
    i = sandbox.products_with(kind)[0]
    (outcome,) = execute([task_input(sandbox.product_url(i))])
    assert outcome.error_class is ErrorClass.RATE_LIMITED
    assert outcome.http_status == 429
    wait = sandbox.shop.retry_after_seconds
    if kind == "rate_limited":
        assert outcome.retry_after == float(wait)
    else:
        # An HTTP-date has whole seconds and the sandbox rounds up: wait..wait+2.
        assert wait - 0.01 <= outcome.retry_after <= wait + 2.01


def test_artefacts_never_carry_credentials():
    from aiohttp import web

    from recovery.sandbox.runner import start_in_thread

    async def leaky(request):
        response = web.Response(
            status=403,
            text="<p>denied; api_key=abcd1234 token=zzz</p>",
            content_type="text/html",
            headers={"X-Session-Token": "s3cret", "Authorization": "Bearer x"},
        )
        response.set_cookie("sid", "cookie-secret")
        return response

    app = web.Application()
    app.router.add_get("/", leaky)
    served = start_in_thread(app)
    try:
        (outcome,) = execute([task_input(served.base_url + "/")])
    finally:
        served.stop()
    assert outcome.error_class is ErrorClass.AUTH_REFUSED  # a first 403: retried
    text = repr(outcome.artefact)
    for secret in ("s3cret", "Bearer x", "cookie-secret", "abcd1234"):
        assert secret not in text
    assert {k.lower() for k in outcome.artefact["headers"]}.isdisjoint(
        {"set-cookie", "authorization", "x-session-token"}
    )


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (200, None),
        (204, None),
        # Retried first; the provider makes a persistent one ACCESS (test_auth_retries.py).
        (401, ErrorClass.AUTH_REFUSED),
        (403, ErrorClass.AUTH_REFUSED),
        (404, ErrorClass.NOT_FOUND),
        (410, ErrorClass.NOT_FOUND),
        (408, ErrorClass.NETWORK),
        (429, ErrorClass.RATE_LIMITED),
        (400, ErrorClass.CLIENT_ERROR),
        (451, ErrorClass.CLIENT_ERROR),
        (500, ErrorClass.SERVER),
        (502, ErrorClass.SERVER),
        (503, ErrorClass.SERVER),
        (504, ErrorClass.SERVER),
        (304, ErrorClass.CLIENT_ERROR),
    ],
)
def test_statuses_map_onto_the_retry_table(status, error_class):
    assert classify_status(status) is error_class


def test_blocked_and_invalid_urls_are_outcomes_not_crashes():
    outcomes = execute(
        [
            task_input("http://10.0.0.1/product/1"),
            task_input("ftp://example.com/x"),
            task_input("http://[::1/"),
        ]
    )
    assert [o.error_class for o in outcomes] == [ErrorClass.BLOCKED] * 3
    assert all(o.artefact["reason"] for o in outcomes)


def test_an_unknown_page_type_is_a_schema_failure(sandbox):
    (outcome,) = execute([task_input(sandbox.product_url(1), page_type="nope")])
    assert outcome.error_class is ErrorClass.SELECTOR
    assert "'nope'" in outcome.error_detail


def test_bad_provider_options_are_named():
    with pytest.raises(ValueError, match=r"provider_options\.per_hots"):
        parse_options({"per_hots": 3})
    with pytest.raises(ValueError, match=r"provider_options\.deadline"):
        parse_options({"deadline": "soon"})
    with pytest.raises(ValueError, match=r"provider_options\.concurrency"):
        parse_options({"concurrency": 0})
    assert get_provider("direct", concurrency=4).concurrency == 4


def test_a_listing_yields_products_and_the_next_cursor(sandbox):
    (outcome,) = execute([task_input(sandbox.url("/listing"), page_type="listing")])
    assert outcome.ok and outcome.observations == []
    links = [d for d in outcome.discovered if d.discovery == "link"]
    (nxt,) = [d for d in outcome.discovered if d.discovery == "cursor"]
    top = sandbox.pages
    assert [d.url for d in links] == [
        f"{sandbox.base_url}/product/{i}" for i in range(top, top - 20, -1)
    ]
    assert {d.page_type for d in links} == {"product"}
    assert nxt.page_type == "listing"
    assert nxt.url.startswith(f"{sandbox.base_url}/listing?cursor=")
    # link_depth: the engine makes the next page one deeper; in links it is not.
    assert nxt.navigation == {"cursor": nxt.url, "page": 2, "link_depth": 0}


def test_an_offset_listing_yields_offset_navigation(sandbox):
    url = sandbox.url("/listing?offset=0&limit=10")
    (outcome,) = execute([task_input(url, page_type="listing")])
    (nxt,) = [d for d in outcome.discovered if d.discovery != "link"]
    assert nxt.discovery == "offset"
    assert nxt.navigation == {"offset": 10, "page": 2, "link_depth": 0}
    assert len([d for d in outcome.discovered if d.discovery == "link"]) == 10


def test_links_stop_at_max_depth(sandbox):
    categories = task_input(sandbox.url("/categories"), page_type="categories")
    too_deep = task_input(sandbox.url("/category/kitchen"), page_type="category", depth=2)
    (top,), (deep,) = execute([categories]), execute([too_deep])
    assert len(top.discovered) == 8 and {d.page_type for d in top.discovered} == {"category"}
    assert deep.ok and deep.discovered == []


def test_pagination_does_not_count_as_link_depth(sandbox):
    # The engine deepens every child by one; page 5 of a listing is still 0 links deep.
    page5 = task_input(
        sandbox.url("/listing?offset=40&limit=10"),
        page_type="listing",
        depth=4,
        navigation={"offset": 40, "page": 5, "link_depth": 0},
    )
    (outcome,) = execute([page5])
    links = [d for d in outcome.discovered if d.discovery == "link"]
    (nxt,) = [d for d in outcome.discovered if d.discovery == "offset"]
    assert len(links) == 10
    assert all(d.navigation == {"link_depth": 1} for d in links)
    assert nxt.navigation == {"offset": 50, "page": 6, "link_depth": 0}


# --- through the engine -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_every_kind_ends_in_its_final_state_through_the_engine(make_sandbox, tmp_path, settings):
    settings.SALVAGE_BACKOFF_BASE = 0.05
    settings.SALVAGE_BACKOFF_CAP = 0.2
    shop = make_sandbox(pages=len(KINDS) * 2, faults="every", retry_after_seconds=1)
    load_shop("shopx")
    run = create_run(
        "shopx", [(shop.product_url(i), "product") for i in range(1, shop.pages + 1)], tmp_path
    )

    worker.run_until_idle("direct-test", idle_wait=4.0)

    tasks = {t.url: t for t in Task.objects.filter(run=run)}
    assert len(tasks) == shop.pages
    for i in range(1, shop.pages + 1):
        expected = shop.expected(i)
        task = tasks[shop.product_url(i)]
        assert task.state == expected.final_state, (expected.kind, task.last_error_class)
        if expected.final_state != "committed":
            assert task.last_error_class == expected.error_class, expected.kind
    observed = Observation.objects.filter(run=run)
    assert observed.count() == shop.summary()["observations"]
    assert sorted(observed.values_list("entity_key", flat=True)) == sorted(
        shop.expected(i).sku for i in range(1, shop.pages + 1) if shop.expected(i).observation
    )
    # Every quarantined attempt kept a diagnostic artefact.
    for attempt in Attempt.objects.filter(run=run, outcome="quarantined"):
        assert attempt.artefact and attempt.artefact.get("reason"), attempt.error_class


@pytest.mark.django_db(transaction=True)
def test_a_429_delays_the_next_attempt_by_retry_after(make_sandbox, tmp_path):
    shop = make_sandbox(pages=40, faults="every", retry_after_seconds=1)
    load_shop("shop429")
    targets = shop.products_with("rate_limited")[:1] + shop.products_with("rate_limited_date")[:1]
    run = create_run("shop429", [(shop.product_url(i), "product") for i in targets], tmp_path)

    worker.run_until_idle("direct-429", idle_wait=5.0)

    for i in targets:
        task = Task.objects.get(run=run, url=shop.product_url(i))
        assert task.state == "committed"
        first, second = Attempt.objects.filter(task=task).order_by("started_at")
        assert first.error_class == "rate_limited" and first.http_status == 429
        waited = (second.started_at - first.finished_at).total_seconds()
        assert waited >= 0.95, (shop.fault(i), waited)
    assert Counter(Attempt.objects.filter(run=run).values_list("outcome", flat=True)) == {
        "retry": 2,
        "committed": 2,
    }


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [
        (503, {"Retry-After": "7"}, 7.0),
        (429, {"Retry-After": "soon"}, None),  # malformed: the engine backs off instead
        (429, {"Retry-After": "-5"}, None),
        (429, {"Retry-After": "99999999999"}, 3600.0),  # capped (SALVAGE_RETRY_AFTER_CAP)
        # Measured against the server's own Date header, so clock skew cancels out.
        (
            429,
            {
                "Date": "Sun, 06 Nov 1994 08:49:37 GMT",
                "Retry-After": "Sun, 06 Nov 1994 08:49:52 GMT",
            },
            15.0,
        ),
        (500, {"Retry-After": "7"}, None),
    ],
)
def test_retry_after_is_parsed_safely(status, headers, retry_after):
    from aiohttp import web

    from recovery.sandbox.runner import start_in_thread

    async def limited(request):
        response = web.Response(status=status, text="busy", content_type="text/html")
        response.headers.update(headers)
        return response

    app = web.Application()
    app.router.add_get("/", limited)
    served = start_in_thread(app)
    try:
        (outcome,) = execute([task_input(served.base_url + "/")])
    finally:
        served.stop()
    assert outcome.http_status == status
    assert outcome.retry_after == retry_after


def test_execute_many_keeps_order_and_the_bound_and_survives_a_bug(monkeypatch):
    """Lanes take the tasks in order: at most `concurrency` at once (also across concurrent
    calls), one outcome per task in the tasks' order, a crashing task filed as internal."""
    provider = get_provider("direct", concurrency=3)
    in_flight = peak = 0

    async def execute(task):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (task.task_id % 4))
        in_flight -= 1
        if task.task_id == 5:
            raise RuntimeError("boom")
        from recovery.outcomes import Outcome

        return Outcome(http_status=200 + task.task_id)

    monkeypatch.setattr(provider, "execute", execute)
    tasks = [task_input(f"http://shop.test/p/{i}", task_id=i) for i in range(10)]

    async def go():
        return await asyncio.gather(provider.execute_many(tasks), provider.execute_many(tasks))

    for outcomes in asyncio.run(go()):
        assert [o.http_status for o in outcomes] == [200 + i if i != 5 else None for i in range(10)]
        assert outcomes[5].error_class is ErrorClass.INTERNAL and "boom" in outcomes[5].error_detail
    assert peak == 3
    assert asyncio.run(provider.execute_many([])) == []
