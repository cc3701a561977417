"""Datasets from the browser, in headless Chromium: an admin reaches the datasets page by its
link, uploads a bad spec and a bad manifest (the command line's messages beside the fields,
every table unchanged), then good ones (the dataset and the run exist as the commands make
them); an operator sees the datasets but no upload form."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from recovery.models import AuditEntry, Dataset, Run, Task
from tests.browser.test_dashboard_browser import log_in
from tests.support.uploads import (
    BAD_MANIFEST,
    BAD_SPEC,
    BAD_SPEC_LINE,
    SHOP_MANIFEST,
    SHOP_SPEC,
    command_error,
    table_counts,
)
from tests.support.world import make_users

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_an_admin_uploads_bad_then_good_specs_and_manifests(
    transactional_db, live_server, page, screenshot, tmp_path, monkeypatch
):
    make_users()
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    (tmp_path / "typo.toml").write_text(BAD_SPEC)
    (tmp_path / "bad.csv").write_text(BAD_MANIFEST)
    spec_says = command_error("loaddataset", "typo.toml", cwd=tmp_path, monkeypatch=monkeypatch)
    createrun_says = command_error(
        "createrun",
        "shop",
        "--window",
        "2026-12-01",
        "--manifest",
        "bad.csv",
        cwd=tmp_path,
        monkeypatch=monkeypatch,
    )

    log_in(page, live_server, "adam")
    page.locator("header nav").get_by_role("link", name="Datasets").click()
    expect(page.locator("h1")).to_have_text("Datasets")
    expect(page.locator("#datasets")).to_contain_text("shop")

    # A bad spec: loaddataset's message beside the file field, its line marked, nothing written.
    before = table_counts()
    page.set_input_files("#spec-upload input[type=file]", str(tmp_path / "typo.toml"))
    page.get_by_role("button", name="Upload spec").click()
    error = page.locator("#spec-upload .field-error")
    expect(error).to_have_count(1)
    assert _squash(error.inner_text()) == _squash(spec_says)
    expect(page.locator("#spec-upload .bad-line")).to_contain_text(f"{BAD_SPEC_LINE} | sku =")
    screenshot(page, "dataset-spec-refused")
    assert table_counts() == before

    # A bad manifest: createrun's message, its first ten bad lines listed, nothing written.
    page.locator("#datasets").get_by_role("link", name="shop").click()
    expect(page.locator("h1")).to_have_text("Dataset shop")
    page.fill("#manifest-upload input[name=window]", "2026-12-01")
    page.set_input_files("#manifest-upload input[name=manifest]", str(tmp_path / "bad.csv"))
    page.get_by_role("button", name="Create run").click()
    expect(page.locator("#manifest-upload .field-error")).to_have_count(1)
    shown = page.locator("#manifest-upload .field-error").inner_text()
    assert _squash(shown) == _squash(createrun_says)
    expect(page.locator("#bad-lines li")).to_have_count(11)
    expect(page.locator("#bad-lines li").first).to_have_text(
        "line 2: priority 'high' must be an integer"
    )
    expect(page.locator("#bad-lines li").last).to_have_text("and 2 more")
    screenshot(page, "dataset-manifest-refused")
    assert table_counts() == before

    # A good spec (a new version): stored as loaddataset stores it, the history shows both.
    v2 = tmp_path / "shop.toml"
    v2.write_text(SHOP_SPEC.read_text().replace('scraper_version = "1"', 'scraper_version = "2"'))
    page.locator("header nav").get_by_role("link", name="Datasets").click()
    page.set_input_files("#spec-upload input[type=file]", str(v2))
    page.get_by_role("button", name="Upload spec").click()
    # A new version shows its diff against the current one first; nothing is stored yet.
    expect(page.locator("h1")).to_have_text("Replace the spec of dataset shop?")
    expect(page.locator("#spec-diff .diff-del")).to_have_text(['-  "scraper_version": "1"'])
    expect(page.locator("#spec-diff .diff-add")).to_have_text(['+  "scraper_version": "2"'])
    assert Dataset.objects.get(name="shop").spec["scraper_version"] == "1"
    screenshot(page, "dataset-spec-diff")
    page.get_by_role("button", name="Replace spec").click()
    expect(page.locator("h1")).to_have_text("Dataset shop")
    dataset = Dataset.objects.get(name="shop")
    expect(page.locator("main .message.success")).to_have_text(
        f"dataset shop updated (spec {dataset.spec_sha256[:12]})"
    )
    expect(page.locator("#spec-sha256")).to_have_text(dataset.spec_sha256)
    expect(page.locator("#spec-history tbody tr")).to_have_count(2)
    out = io.StringIO()
    call_command("loaddataset", str(v2), stdout=out)
    assert out.getvalue().strip() == f"dataset shop unchanged (spec {dataset.spec_sha256[:12]})"
    assert AuditEntry.objects.get(action="dataset_updated").actor == "adam"

    # A good manifest: the run createrun would make, and the page says what it printed.
    page.fill("#manifest-upload input[name=window]", "2026-12-01")
    page.set_input_files("#manifest-upload input[name=manifest]", str(SHOP_MANIFEST))
    page.get_by_role("button", name="Create run").click()
    run = Run.objects.get(dataset=dataset, window="2026-12-01")
    expect(page).to_have_url(f"{live_server.url}/runs/{run.pk}/")
    expect(page.locator("main .message.success").first).to_contain_text(
        f"run {run.pk} shop@2026-12-01 created: 9 task(s) added from 10 CSV line(s)"
    )
    assert Task.objects.filter(run=run).count() == run.task_total == 9
    assert run.scraper_version == "2"
    screenshot(page, "dataset-run-created")
    page.goto(f"{live_server.url}/datasets/shop/")
    expect(page.locator("#dataset-runs")).to_contain_text("2026-12-01")
    screenshot(page, "dataset-detail")


def test_an_operator_sees_datasets_but_cannot_upload(transactional_db, live_server, page):
    make_users()
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    log_in(page, live_server, "olivia")
    page.locator("header nav").get_by_role("link", name="Datasets").click()
    expect(page.locator("#datasets")).to_contain_text("shop")
    expect(page.locator("#spec-upload")).to_have_count(0)
    page.locator("#datasets").get_by_role("link", name="shop").click()
    expect(page.locator("#spec")).to_be_attached()
    expect(page.locator("#manifest-upload")).to_have_count(0)


def test_a_version_saved_meanwhile_draws_the_diff_again_and_cancel_stores_nothing(
    transactional_db, live_server, page, tmp_path
):
    make_users()
    call_command("loaddataset", str(SHOP_SPEC), stdout=io.StringIO())
    versions = {}
    for version in ("2", "3"):
        versions[version] = tmp_path / f"v{version}" / "shop.toml"
        versions[version].parent.mkdir()
        versions[version].write_text(
            SHOP_SPEC.read_text().replace('scraper_version = "1"', f'scraper_version = "{version}"')
        )
    log_in(page, live_server, "adam")
    page.goto(f"{live_server.url}/datasets/")
    page.set_input_files("#spec-upload input[type=file]", str(versions["2"]))
    page.get_by_role("button", name="Upload spec").click()
    expect(page.locator("#spec-diff .diff-add")).to_have_text(['+  "scraper_version": "2"'])
    expect(page.locator("#spec-moved")).to_have_count(0)

    # Another admin saves version 3 while this one reads the diff against version 1.
    call_command("loaddataset", str(versions["3"]), stdout=io.StringIO())
    page.get_by_role("button", name="Replace spec").click()
    # Not saved over it: the diff again, now against version 3, and said so.
    expect(page.locator("#spec-moved")).to_be_visible()
    expect(page.locator("#spec-diff .diff-del")).to_have_text(['-  "scraper_version": "3"'])
    expect(page.locator("#spec-diff .diff-add")).to_have_text(['+  "scraper_version": "2"'])
    assert Dataset.objects.get(name="shop").spec["scraper_version"] == "3"

    page.get_by_role("link", name="Cancel").click()
    expect(page).to_have_url(f"{live_server.url}/datasets/")
    assert Dataset.objects.get(name="shop").spec["scraper_version"] == "3"
    assert not AuditEntry.objects.filter(action="dataset_updated", actor="adam").exists()
