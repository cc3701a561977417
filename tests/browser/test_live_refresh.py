"""Live refresh on the task list, in headless Chromium (issue 29): the list follows the database
by itself, says how fresh it is, stops while paused, and says so visibly when a refresh fails
(here: the session ended, so the refresh is sent to the log-in page)."""

from __future__ import annotations

import re

import pytest
from django.contrib.sessions.models import Session
from playwright.sync_api import expect

from recovery.models import Task
from tests.browser.test_dashboard_browser import log_in
from tests.support.world import make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFRESH = 10  # seconds: _task_rows.html's data-refresh


def attempts_cell(page, task: Task):
    row = page.locator("#tasks tr[data-row]").filter(
        has=page.locator(f"a[href='/tasks/{task.pk}/']")
    )
    return row.locator("td.num").first


@pytest.mark.parametrize("list_page", ["tasks", "quarantine"])
def test_a_task_list_refreshes_itself_pauses_and_shows_a_failed_refresh(
    transactional_db, live_server, page, list_page
):
    make_users()
    world = make_world()
    task = Task.objects.filter(run=world.run, state="quarantined").order_by("pk").first()
    log_in(page, live_server, "olivia")
    page.goto(f"{live_server.url}/runs/{world.run.pk}/{list_page}/")
    status = page.locator("#refresh-status")
    expect(status).to_have_attribute("data-state", "live")
    expect(status).to_contain_text("Live; updated just now")

    # The database moves; the list follows without a reload.
    Task.objects.filter(pk=task.pk).update(attempt_count=77)
    expect(attempts_cell(page, task)).to_have_text("77", timeout=3 * REFRESH * 1000)

    # Paused: a whole refresh interval passes (the age says so) and the row stays as it was.
    page.click("#refresh-status button[name=refresh-pause]")
    expect(status).to_have_attribute("data-state", "paused")
    Task.objects.filter(pk=task.pk).update(attempt_count=88)
    age = status.locator("[data-refresh-age]")
    expect(age).to_have_text(
        re.compile(r"^Paused; updated (1[2-9]|[2-9]\d) s ago$"), timeout=4 * REFRESH * 1000
    )
    expect(attempts_cell(page, task)).to_have_text("77")

    # Resumed, then the session ends: the next refresh fails, and the page says so.
    page.click("#refresh-status button[name=refresh-pause]")
    expect(attempts_cell(page, task)).to_have_text("88", timeout=3 * REFRESH * 1000)
    Session.objects.all().delete()
    failure = status.locator("[data-refresh-failure]")
    expect(failure).to_be_visible(timeout=3 * REFRESH * 1000)
    expect(failure).to_contain_text("Refresh failed at")
    expect(failure).to_contain_text("logged out")
    expect(status).to_have_attribute("data-state", "failing")
