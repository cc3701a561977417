"""The operator's second week in headless Chromium: the "needs attention" page and its count in
the top bar, then a bulk action on selected rows through its confirmation page.

An admin opens /attention/ (each condition with its count, the top bar's total equal to their
sum), follows a condition's link to its filtered list, selects two quarantined tasks on a run's
quarantine page filtered to one partition, chooses "rerun", reads the confirmation (the exact
count, the tasks, a reason), confirms, and lands on the same filtered list with "2 tasks queued".
Screenshots of the attention page and the confirmation go to docs/screenshots/ (README).
"""

from __future__ import annotations

import re
import shutil
from datetime import time, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from recovery.models import AuditEntry, RecoveryBatch, Schedule, Task
from tests.browser.test_dashboard_browser import log_in
from tests.support.world import make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _keep(screenshot, page, name: str) -> None:
    """test-output/screenshots/<name>.png, copied to docs/screenshots/ for the README."""
    shutil.copyfile(screenshot(page, name), DOCS / f"{name}.png")


def test_an_admin_sees_what_needs_attention_and_reruns_selected_tasks(
    transactional_db, live_server, page, screenshot
):
    make_users()
    world = make_world()
    Schedule.objects.create(
        dataset=world.run.dataset,
        name="nightly",
        kind="daily",
        at_time=time(6, 0),
        manifest_source="previous",
        created_at=timezone.now() - timedelta(days=2),
    )  # no dispatcher ran: overdue

    log_in(page, live_server, "adam")
    page.goto(f"{live_server.url}/attention/")
    expect(page.locator("h1")).to_have_text("Needs attention")
    cards = page.locator("section.attention-item")
    counts = [int(n) for n in cards.evaluate_all("els => els.map(e => e.dataset.count)")]
    keys = cards.evaluate_all("els => els.map(e => e.id)")
    for key in (
        "attention-unreviewed_quarantine",
        "attention-reconcile_waiting",
        "attention-failing_deliveries",
        "attention-overdue_schedules",
    ):
        assert key in keys
    expect(page.locator("#attention-failing_deliveries .count")).to_have_text("2")
    expect(page.locator("#attention-count")).to_have_text(str(sum(counts)))
    _keep(screenshot, page, "attention")

    # A condition's link: the runs list filtered to those runs.
    page.locator("#attention-unreviewed_quarantine a.attention-list").click()
    expect(page).to_have_url(re.compile(r"/runs/\?needs=unreviewed_quarantine$"))
    expect(page.locator(f"#runs [data-row] >> text=#{world.run.pk}").first).to_be_visible()

    # Select two quarantined tasks of one partition, then the bulk rerun.
    filtered = f"/runs/{world.run.pk}/quarantine/?partition=beta.test"
    page.goto(f"{live_server.url}{filtered}")
    beta = sorted(
        Task.objects.filter(run=world.run, partition="beta.test").values_list("pk", flat=True)
    )
    page.locator("#tasks th.pick input[data-select-all]").check()
    for pk in beta:
        expect(page.locator(f'input[name=pk][value="{pk}"]')).to_be_checked()
    expect(page.locator("#bulk [data-bulk-count]")).to_contain_text("2 selected")
    page.locator("#bulk select[name=action]").select_option("rerun")
    page.locator("#bulk button[name=bulk]").click()

    expect(page.locator("h1")).to_have_text(f"Rerun 2 selected tasks of run #{world.run.pk}?")
    expect(page.locator("#bulk-count strong")).to_have_text("2")
    expect(page.locator("#bulk-rows li")).to_have_count(2)
    page.fill("textarea[name=reason]", "selector fixed on beta.test")
    assert RecoveryBatch.objects.count() == 0  # nothing changed before the confirmation
    _keep(screenshot, page, "bulk-confirm")
    page.get_by_role("button", name="Yes, rerun 2 tasks").click()

    # Back on the same filtered list, with the count.
    expect(page).to_have_url(re.compile(re.escape(filtered) + "$"))
    expect(page.locator("p.message.success")).to_have_text(
        re.compile(r"^2 tasks queued in recovery batch \d+\.$")
    )
    batch = RecoveryBatch.objects.get()
    assert batch.task_count == 2 and batch.selection["tasks"] == beta
    assert AuditEntry.objects.filter(action="create_recovery_batch", actor="adam").count() == 1
