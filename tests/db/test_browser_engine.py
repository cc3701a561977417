"""The browser provider through the engine (claim, render, fenced commit) on the JS sandbox.

The README's browser example (its TOML block, which must equal examples/js-shop.toml) is the
dataset: on three script-rendered product pages it commits the values the sandbox holds; the
same spec with the direct provider quarantines every page as an empty shell, which is why the
browser provider exists.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from recovery import worker
from recovery.intake import manifests, specs
from recovery.models import Attempt, Observation, Task
from recovery.sandbox import jsshop
from tests.support.browser_provider import need_chromium

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = (1, 2, 3)


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- browser-example:start.*?-->\n```toml\n(.*?)```\n<!-- browser-example:end -->",
        readme,
        re.S,
    )
    assert block, "README has no browser example"
    return block.group(1)


def test_the_readme_example_is_the_example_file():
    assert readme_example() == (ROOT / "examples/js-shop.toml").read_text()


@pytest.mark.browser
def test_the_browser_commits_what_the_direct_provider_sees_as_an_empty_shell(
    sandbox,
    tmp_path,
    settings,
):
    need_chromium()
    settings.SALVAGE_ALLOWED_NETWORKS = [f"127.0.0.1:{sandbox.base_url.rsplit(':', 1)[1]}"]
    example = tomllib.loads(readme_example())
    specs.save_dataset(specs.validate(example))
    direct = {**example, "name": "js-direct", "provider": "direct", "provider_options": {}}
    specs.save_dataset(specs.validate(direct))
    manifest = tmp_path / "js.csv"  # as the README writes it: one URL column
    manifest.write_text("url\n" + "".join(sandbox.url(f"/js/product/{i}") + "\n" for i in PAGES))
    rendered = manifests.create_run("js-shop", "2026-12-01", manifest).run
    plain = manifests.create_run("js-direct", "2026-12-01", manifest).run
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
