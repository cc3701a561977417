"""The browser provider against the sandbox's JavaScript pages, in headless Chromium.

Values come from the sandbox's own functions (jsshop.expected_values), never hard-coded.
Outbound safety: the allow-list is the sandbox's own address and port (127.0.0.1:<port>);
a listener on another loopback port records every connection it gets, so "refused" is proven
by its own log.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from recovery.fetch import artefacts, chromium
from recovery.outcomes import ErrorClass
from recovery.providers.browser import BrowserProvider, parse_options
from recovery.sandbox import jsshop
from tests.support.browser_provider import (
    CHROMIUM,
    Listener,
    browser_spec,
    need_chromium,
    render,
    task_input,
)

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def _only_the_sandbox_is_allowed(settings, tmp_path, sandbox):
    need_chromium()
    settings.SALVAGE_ALLOWED_NETWORKS = [f"127.0.0.1:{sandbox.base_url.rsplit(':', 1)[1]}"]
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"


@pytest.fixture
def listener():
    server = Listener("127.0.0.1")
    yield server
    server.close()


def test_it_extracts_what_the_script_inserts(sandbox):
    outcomes = render([sandbox.url(f"/js/product/{i}") for i in (1, 2, 3)])
    for i, outcome in zip((1, 2, 3), outcomes, strict=True):
        assert outcome.ok, outcome.error_detail
        (obs,) = outcome.observations
        expected = jsshop.expected_values(i, seed=sandbox.seed, pages=sandbox.pages)
        assert obs.payload == expected
        assert obs.entity_key == expected["sku"]


def test_it_clicks_load_more_within_its_bound(sandbox):
    (outcome,) = render(
        [sandbox.url("/js/listing")],
        page_type="listing",
        wait_for="a.product-link",
        load_more="#load-more",
        max_steps=5,
    )
    assert outcome.ok, outcome.error_detail
    urls = [d.url for d in outcome.discovered]
    assert urls == [sandbox.url(f"/js/product/{i}") for i in range(1, jsshop.LISTING_SIZE + 1)]

    (bounded,) = render(
        [sandbox.url("/js/listing")],
        page_type="listing",
        wait_for="a.product-link",
        load_more="#load-more",
        max_steps=1,
    )
    assert len(bounded.discovered) == 2 * jsshop.LISTING_STEP


def test_it_scrolls_an_endless_feed_within_its_bound(sandbox):
    def links(steps: int) -> int:
        (outcome,) = render(
            [sandbox.url("/js/feed")],
            page_type="listing",
            wait_for="a.product-link",
            scroll_steps=steps,
            viewport_height=400,
        )
        assert outcome.ok, outcome.error_detail
        return len(outcome.discovered)

    assert links(1) == 2 * jsshop.LISTING_STEP
    assert links(10) == jsshop.LISTING_SIZE  # stops when the page no longer grows


def test_scripts_images_and_websockets_never_reach_a_forbidden_address(sandbox, listener):
    probe = f"/js/probe?host={listener.host}&port={listener.port}"
    (outcome,) = render([sandbox.url(probe)], block=[])
    # The page itself is fine; what it tried is logged on the attempt's artefact.
    assert outcome.ok, outcome.error_detail
    refused = "\n".join(outcome.artefact["refused"])
    target = f"{listener.host}:{listener.port}"
    assert f"GET http://{target}/fetch" in refused
    assert f"GET http://{target}/img" in refused
    assert f"CONNECT {target}" in refused  # the WebSocket's tunnel
    assert f"port {listener.port} not allowed" in refused
    assert listener.seen == []


def test_a_redirect_to_a_forbidden_address_is_blocked_url(sandbox, listener):
    hop = f"/js/redirect?host={listener.host}&port={listener.port}"
    direct = f"http://{listener.host}:{listener.port}/doc"
    redirected, asked = render([sandbox.url(hop), direct])
    assert redirected.error_class == ErrorClass.BLOCKED, redirected.error_detail
    assert f"http://{listener.host}:{listener.port}/doc" in redirected.error_detail
    assert asked.error_class == ErrorClass.BLOCKED
    assert listener.seen == []


def test_a_page_that_never_settles_hits_the_deadline(sandbox):
    started = time.monotonic()
    (outcome,) = render([sandbox.url("/js/never")], deadline=2.0)
    assert outcome.error_class == ErrorClass.NETWORK
    assert "deadline" in outcome.error_detail or "imeout" in outcome.error_detail
    assert time.monotonic() - started < 2.0 + 10  # the deadline, plus one browser start


def test_a_failed_check_keeps_a_capped_screenshot_and_the_rendered_html(sandbox, settings):
    # A rendered product where the spec expects a listing: the template check fails.
    (outcome,) = render([sandbox.url("/js/product/4")], page_type="listing")
    assert outcome.error_class == ErrorClass.WRONG_TEMPLATE, outcome.error_detail
    art = outcome.artefact
    png = artefacts.read_screenshot(art["screenshot"])
    assert png.startswith(artefacts.PNG_MAGIC)
    assert len(png) <= settings.SALVAGE_SCREENSHOT_MAX_BYTES
    html = (Path(settings.SALVAGE_ARTEFACT_DIR) / art["rendered_html"]).read_text()
    assert jsshop.expected_values(4)["sku"] in html  # the rendered DOM, not the shell

    (capped,) = render(
        [sandbox.url("/js/product/4")], page_type="listing", screenshot_max_bytes=1024
    )
    assert "screenshot" not in capped.artefact
    assert "over the 1024-byte cap" in capped.artefact["screenshot_skipped"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"wait": "idle"}, "provider_options.wait: must be one of"),
        ({"block": ["document"]}, "unknown resource type(s) document"),
        ({"max_steps": 3}, "needs load_more"),
        ({"scroll_steps": 500}, "must be <= 50"),
        ({"proxy": "x"}, "unknown option for the browser provider"),
    ],
)
def test_it_refuses_bad_options_by_name(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_options(options)


def test_a_browser_crash_mid_render_is_a_network_failure_and_the_next_task_relaunches(sandbox):
    spec = browser_spec()
    requests = sandbox.served._runner.app[jsshop.JS_REQUESTS]
    requests.clear()

    async def go():
        provider = BrowserProvider(**spec["provider_options"])
        try:
            slow = task_input(sandbox.url("/js/product/6?delay=5"), spec)
            running = asyncio.ensure_future(provider.execute_many([slow]))
            deadline = time.monotonic() + 30
            while not requests["/js/api/product/6"] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert requests["/js/api/product/6"], "the page never asked for its data"
            chromium.shared(CHROMIUM).kill()  # the browser process dies mid-render
            (crashed,) = await running
            (after,) = await provider.execute_many([task_input(sandbox.url("/js/product/7"), spec)])
            return crashed, after, chromium.shared(CHROMIUM).launches
        finally:
            await provider.aclose()

    crashed, after, launches = asyncio.run(go())
    assert crashed.error_class == ErrorClass.NETWORK, crashed.error_detail
    assert "browser crashed or closed" in crashed.error_detail
    assert after.ok, after.error_detail
    assert launches == 2
