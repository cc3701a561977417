"""The demo's whole story in headless Chromium, from `manage.py demo` to an exported dataset.

`manage.py demo` runs as a real process (its own SQLite database under a temporary data
directory, its sandbox, dispatcher, django-q2 cluster and gunicorn). Three people follow the
checklist the home page shows:
- the operator sees the redesigned retailer flagged provisionally within 30 s of the
  dashboard answering, then the candidate's quarantine;
- the admin loads the spec's version 2 (the fixed price selector), creates a recovery batch
  for that retailer with scraper version 2, watches it recover "N of N", then accepts and
  publishes the run;
- the exporter downloads the CSV, whose rows are exactly the run's valid observations.
Fewer pages than the default demo (`--pages`) keep it lean; the story is the same.
"""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from recovery.ops.processes import free_port, manage_py, wait_until
from recovery.sandbox import site

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow]

PAGES = 600
BAD = site.bad_retailer_for(0)


@pytest.fixture
def demo(tmp_path):
    data_dir = tmp_path / "var"
    out = tmp_path / "demo.out"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(SALVAGE_INSECURE_DEV_KEY="1", DJANGO_SETTINGS_MODULE="recovery.settings")
    argv = manage_py(
        "demo", "--data-dir", str(data_dir), "--port", str(port), "--pages", str(PAGES),
        "--no-browser-open",
    )  # fmt: skip
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_until(
            lambda: "Dashboard: " in out.read_text() or proc.poll() is not None,
            timeout=240,
            what="the demo's URL",
        )
        answered = time.monotonic()
        assert proc.poll() is None, out.read_text()
        passwords = dict(
            line.split(" ", 1) for line in (data_dir / "demo-passwords").read_text().splitlines()
        )
        yield {
            "url": f"http://127.0.0.1:{port}",
            "answered": answered,
            "passwords": passwords,
            "db": data_dir / "salvage.sqlite3",
            "out": out,
        }
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert proc.returncode == 0, out.read_text()


def query(db: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return conn.execute(sql, args).fetchall()


def log_in(page, demo, username: str) -> None:
    page.goto(f"{demo['url']}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", demo["passwords"][username])
    page.click("button[type=submit]")
    expect(page.locator("header .logout span")).to_have_text(username)
    # In the demo every role lands on the checklist.
    expect(page.locator("#demo-steps")).to_be_visible()


def click_and_confirm(page, action: str, then) -> None:
    """Click a consequential action (a button, or a link to its confirmation page), then the
    confirmation step when there is one, until `then` (a locator on the result) is visible."""
    name = re.compile(f"^{re.escape(action)}")
    page.get_by_role("link", name=name).or_(page.get_by_role("button", name=name)).first.click()
    confirm = page.get_by_role("button", name=re.compile(r"^(Confirm|Yes)"))
    expect(confirm.or_(then).first).to_be_visible()
    if confirm.count():
        confirm.first.click()
    expect(then).to_be_visible()


def step(page, key: str):
    return page.locator(f"#demo-steps li[data-step='{key}']")


def test_the_demo_story_from_manage_py_demo_to_an_export(demo, browser, screenshot):
    contexts = {}

    def as_role(role: str):
        context = browser.new_context(
            viewport={"width": 1360, "height": 900}, accept_downloads=True
        )
        context.set_default_timeout(15_000)
        page = context.new_page()
        contexts[role] = context
        log_in(page, demo, role)
        return page

    try:
        # The operator: the redesigned retailer is flagged while the run still collects.
        op = as_role("operator")
        screenshot(op, "demo-checklist-start")
        step(op, "collect").get_by_role("link").click()
        expect(op.locator("h1")).to_contain_text("demo-shop")
        left = demo["answered"] + 30 - time.monotonic()
        flag = op.locator(f"#provisional-partitions tr[data-partition='{BAD}']")
        expect(flag).to_contain_text("provisional", timeout=max(left, 0.1) * 1000)
        assert time.monotonic() - demo["answered"] < 30
        expect(flag).to_contain_text("95% confidence")
        assert op.locator("#run-summary").inner_text().count("collecting") >= 1
        screenshot(op, "demo-provisional-flag")
        (flagged_at,) = query(
            demo["db"],
            "SELECT provisional_at FROM recovery_runpartition WHERE name = ?",
            BAD,
        )[0]
        assert flagged_at

        op.goto(f"{demo['url']}/")
        expect(step(op, "provisional")).to_have_class(re.compile(r"\bdone\b"))
        # The whole run settles; the candidate's evaluation quarantines the retailer for good.
        expect(step(op, "quarantined")).to_have_class(re.compile(r"\bdone\b"), timeout=240_000)
        expect(step(op, "quarantined")).to_contain_text("coverage")
        step(op, "quarantined").get_by_role("link").click()
        expect(op.locator("#partitions")).to_contain_text(BAD)
        expect(op.get_by_role("button", name="Create recovery batch")).to_have_count(0)

        # The admin: repair (spec version 2), rerun the retailer, accept, publish.
        admin = as_role("admin")
        admin.get_by_role("button", name="Load spec version 2").click()
        expect(admin.locator(".message.success")).to_contain_text("Spec version 2 loaded")
        expect(step(admin, "repaired_spec")).to_have_class(re.compile(r"\bdone\b"))
        step(admin, "batch").get_by_role("link").click()
        form = admin.locator("#batch-form")
        # The failed rule selects the retailer's tasks whose rows it failed (not its consent
        # pages or 404s, which no selector repairs), so every task of the batch can recover.
        form.locator("input[name=rules][value='partition_invalid_prices']").check()
        form.locator("textarea[name=reason]").fill("price selector repaired for the new template")
        form.locator("input[name=scraper_version]").fill("2")
        click_and_confirm(admin, "Create recovery batch", admin.locator("#batch-state"))
        # The batch page refreshes itself until the batch completes.
        state = admin.locator("#batch-state")
        expect(state).to_have_attribute("data-state", "completed", timeout=180_000)
        expect(state).to_have_text(re.compile(r"^completed, (\d+) of \1 recovered$"))
        n = int(state.inner_text().split()[1])
        assert n > 0
        assert query(
            demo["db"],
            "SELECT count(*) FROM recovery_observation WHERE partition = ? "
            "AND validation_state = 'valid' AND scraper_version = '2'",
            BAD,
        ) == [(n,)]
        screenshot(admin, "demo-batch-recovered")

        # The batch's completion re-evaluates the run, which becomes a candidate again.
        wait_until(
            lambda: (
                query(
                    demo["db"],
                    "SELECT acceptance_state FROM recovery_run r JOIN recovery_dataset d "
                    "ON d.id = r.dataset_id WHERE d.name = 'demo-shop'",
                )
                == [("candidate",)]
            ),
            timeout=60,
            what="the repaired run to be a candidate",
        )
        admin.goto(f"{demo['url']}/")
        step(admin, "accepted").get_by_role("link").click()
        summary = admin.locator("#run-summary")
        click_and_confirm(admin, "Accept run", summary.locator(".state-accepted"))
        click_and_confirm(admin, "Publish run", summary.locator(".state-published"))

        # The exporter: downloads the published dataset.
        exporter = as_role("exporter")
        step(exporter, "exported").get_by_role("link").click()
        with exporter.expect_download() as info:
            exporter.locator("#exports").get_by_role("link", name="CSV").first.click()
        rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text("utf-8"))))
        (run_id,) = query(
            demo["db"],
            "SELECT r.id FROM recovery_run r JOIN recovery_dataset d ON d.id = r.dataset_id "
            "WHERE d.name = 'demo-shop'",
        )[0]
        valid = {
            key
            for (key,) in query(
                demo["db"],
                # Valid and not held (a held row is one of a quarantined partition).
                "SELECT observation_key FROM recovery_observation o "
                "WHERE run_id = ? AND validation_state = 'valid' AND partition NOT IN "
                "(SELECT name FROM recovery_runpartition p WHERE p.run_id = o.run_id "
                "AND p.quarantined)",
                run_id,
            )
        }
        assert {row["observation_key"] for row in rows} == valid
        assert len(rows) == len(valid) >= 0.9 * PAGES  # the coverage rule passed
        assert all(float(row["price"]) > 0 for row in rows)
        assert sum(row["partition"] == BAD for row in rows) == n

        exporter.goto(f"{demo['url']}/")
        expect(exporter.locator("#demo-progress")).to_have_text("9 of 9 steps done")
        screenshot(exporter, "demo-checklist-done")
    finally:
        for context in contexts.values():
            context.close()
