"""The browser provider through the engine (claim, render, fenced commit) on the JS sandbox.

The same three script-rendered product pages, two datasets: the browser provider commits the
values the sandbox holds; the direct provider quarantines every one as an empty shell, which
is why the browser provider exists.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from recovery import specs, worker
from recovery.models import Attempt, Observation, Task
from recovery.sandbox import jsshop
from tests.browser.browser_fixtures import BROWSER_SPEC, need_chromium
from tests.direct_fixtures import create_run
from tests.sandbox_fixtures import sandbox  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

PAGES = (1, 2, 3)


def _load(name: str, provider: str, options: dict) -> None:
    raw = copy.deepcopy(BROWSER_SPEC)
    raw.update(name=name, provider=provider, provider_options=options)
    specs.save_dataset(specs.validate(raw))


def test_the_browser_commits_what_the_direct_provider_sees_as_an_empty_shell(
    sandbox,  # noqa: F811
    tmp_path,
    settings,
):
    need_chromium()
    settings.SALVAGE_ALLOWED_NETWORKS = [f"127.0.0.1:{sandbox.base_url.rsplit(':', 1)[1]}"]
    _load("js-browser", "browser", {"wait_for": "div.product .price", "deadline": 20.0})
    _load("js-direct", "direct", {"deadline": 5.0})
    urls = [(sandbox.url(f"/js/product/{i}"), "product") for i in PAGES]
    rendered = create_run("js-browser", urls, tmp_path)
    plain = create_run("js-direct", urls, tmp_path)
    try:
        worker.run_until_idle("w-browser-test")
    finally:
        worker.close_providers()

    states = Counter(Task.objects.filter(run=rendered).values_list("state", flat=True))
    assert states == {"committed": len(PAGES)}
    payloads = {o.entity_key: o.payload for o in Observation.objects.filter(run=rendered)}
    expected = {
        v["sku"]: v
        for v in (jsshop.expected_values(i, seed=sandbox.seed, pages=sandbox.pages) for i in PAGES)
    }
    assert payloads == expected

    plain_tasks = Task.objects.filter(run=plain)
    assert Counter(plain_tasks.values_list("state", "last_error_class")) == {
        ("quarantined", "empty_shell"): len(PAGES)
    }
    assert not Observation.objects.filter(run=plain).exists()
    # One attempt per task each: nothing retried, nothing committed twice.
    assert Attempt.objects.filter(run__in=[rendered, plain]).count() == 2 * len(PAGES)
