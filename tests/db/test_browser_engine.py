"""The browser provider through the engine (claim, render, fenced commit) on the JS sandbox.

The README's browser example (its TOML block, which must equal examples/js-shop.toml) is the
dataset: on three script-rendered product pages it commits the values the sandbox holds; the
same spec with the direct provider quarantines every page as an empty shell, which is why the
browser provider exists.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from recovery import worker
from recovery.archive import pages as archive_pages
from recovery.intake import manifests, specs
from recovery.models import Attempt, Observation, Task
from recovery.quality import reruns
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


def _allow_sandbox(settings, sandbox) -> None:
    settings.SALVAGE_ALLOWED_NETWORKS = [f"127.0.0.1:{sandbox.base_url.rsplit(':', 1)[1]}"]


def _manifest(sandbox, tmp_path: Path) -> Path:
    """The JS shop's product pages, as the README writes the manifest: one URL column."""
    manifest = tmp_path / "js.csv"
    manifest.write_text("url\n" + "".join(sandbox.url(f"/js/product/{i}") + "\n" for i in PAGES))
    return manifest


def _expected(sandbox) -> dict[str, dict]:
    """What the site holds, by SKU: the payloads a correct run commits."""
    values = (jsshop.expected_values(i, seed=sandbox.seed, pages=sandbox.pages) for i in PAGES)
    return {v["sku"]: v for v in values}


def test_the_readme_example_is_the_example_file():
    assert readme_example() == (ROOT / "examples/js-shop.toml").read_text()


@pytest.mark.browser
def test_the_browser_commits_what_the_direct_provider_sees_as_an_empty_shell(
    sandbox,
    tmp_path,
    settings,
):
    need_chromium()
    _allow_sandbox(settings, sandbox)
    example = tomllib.loads(readme_example())
    specs.save_dataset(specs.validate(example))
    direct = {**example, "name": "js-direct", "provider": "direct", "provider_options": {}}
    specs.save_dataset(specs.validate(direct))
    manifest = _manifest(sandbox, tmp_path)
    rendered = manifests.create_run("js-shop", "2026-12-01", manifest).run
    plain = manifests.create_run("js-direct", "2026-12-01", manifest).run
    try:
        worker.run_until_idle("w-browser-test")
    finally:
        worker.close_providers()

    states = Counter(Task.objects.filter(run=rendered).values_list("state", flat=True))
    assert states == {"committed": len(PAGES)}
    payloads = {o.entity_key: o.payload for o in Observation.objects.filter(run=rendered)}
    assert payloads == _expected(sandbox)

    plain_tasks = Task.objects.filter(run=plain)
    assert Counter(plain_tasks.values_list("state", "last_error_class")) == {
        ("quarantined", "empty_shell"): len(PAGES)
    }
    assert not Observation.objects.filter(run=plain).exists()
    # One attempt per task each: nothing retried, nothing committed twice.
    assert Attempt.objects.filter(run__in=[rendered, plain]).count() == 2 * len(PAGES)


@pytest.mark.browser
def test_a_batch_from_the_archive_re_extracts_rendered_pages_with_no_request(
    sandbox, tmp_path, settings
):
    """Seed 002, "Rejected output should remain recoverable", for rendered pages: version 1's
    price selector matches nothing, version 2 is the example; the batch re-extracts the HTML
    each render kept, with no browser request to the site, and commits what the site holds."""
    need_chromium()
    _allow_sandbox(settings, sandbox)
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    example = tomllib.loads(readme_example())
    broken = copy.deepcopy(example)
    broken["page_types"]["product"]["fields"]["price"]["selector"] = ".price-was"
    specs.save_dataset(specs.validate(broken))
    manifest = _manifest(sandbox, tmp_path)
    run = manifests.create_run("js-shop", "2026-12-01", manifest).run
    requests = sandbox.served._runner.app[jsshop.JS_REQUESTS]
    try:
        worker.run_until_idle("w-browser-v1")
        tasks = Task.objects.filter(run=run)
        assert Counter(tasks.values_list("state", "last_error_class")) == {
            ("quarantined", "selector_failure"): len(PAGES)
        }
        specs.save_dataset(specs.validate({**example, "scraper_version": "2"}))
        worker._datasets.clear()  # the worker's two-second spec cache (an operator waits)
        requests.clear()
        batch = reruns.create_recovery_batch(
            run.pk,
            error_classes=["selector_failure"],
            reason="price selector repaired",
            scraper_version="2",
            actor="test",
            from_archive=True,
        )
        worker.run_until_idle("w-browser-archive", idle_wait=2.0)
    finally:
        worker.close_providers()

    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    assert not +requests, f"the site was asked again: {dict(requests)}"
    sources = archive_pages.batch_sources(batch)
    assert sources == archive_pages.Sources(archive=len(PAGES), fetched=0)
    payloads = {o.entity_key: o.payload for o in Observation.objects.filter(run=run)}
    assert payloads == _expected(sandbox)
