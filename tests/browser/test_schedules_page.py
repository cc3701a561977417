"""The Schedules page in headless Chromium: an admin adds a schedule through the form (a bad
time first: the command's message beside the field, nothing written), edits it, pauses and
resumes it by clicking, and removes it through the confirmation page; an operator sees its
last and next windows and its last error but no control. Each step is checked against the
database and the audit log."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from playwright.sync_api import expect

from recovery.intake import schedule_runs, schedules
from recovery.models import AuditEntry, Run, Schedule
from tests.browser.test_dashboard_browser import log_in
from tests.support.factories import make_dataset
from tests.support.world import make_users

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _actions() -> list[tuple[str, str]]:
    rows = AuditEntry.objects.filter(action__startswith="schedule_").order_by("pk")
    return list(rows.values_list("action", "actor"))


def test_an_admin_manages_a_schedule_and_an_operator_only_sees_it(
    transactional_db, live_server, page, screenshot, settings, tmp_path
):
    make_users()
    dataset = make_dataset(name="shop")
    settings.SALVAGE_SCHEDULE_MANIFEST_DIR = tmp_path
    manifest = tmp_path / "shop.csv"
    manifest.write_text("url,page_type\nhttps://shop.test/p/1,product\n")
    with pytest.raises(CommandError) as refused:
        call_command(
            "schedule", "add", "shop", "nightly", "--daily", "25:00", "--manifest", str(manifest)
        )

    log_in(page, live_server, "adam")
    page.locator("header nav").get_by_role("link", name="Schedules").click()
    expect(page.locator("h1")).to_have_text("Schedules")
    page.get_by_role("link", name="Add a schedule").click()
    expect(page.locator("h1")).to_have_text("Add a schedule")
    form = page.locator("#schedule-form")
    form.locator("[name=dataset]").select_option("shop")
    form.locator("[name=name]").fill("nightly")
    form.locator("input[name=repeat][value=daily]").check()
    form.locator("[name=at]").fill("25:00")
    form.locator("[name=tz]").fill("Europe/London")
    form.locator("[name=manifest]").fill(str(manifest))
    form.locator("[name=catch_up]").select_option("each")
    form.locator("[name=catch_up_max]").fill("3")

    # A bad time: the command's own message beside the field, nothing written.
    form.get_by_role("button", name="Add schedule").click()
    expect(page.locator("#schedule-form .field-error")).to_have_count(1)
    expect(page.locator("#error-at")).to_have_text(str(refused.value))
    screenshot(page, "schedule-form-refused")
    assert not Schedule.objects.exists() and _actions() == []

    # Fixed: the schedule exists as the command makes it, and the addition is audited.
    page.locator("#schedule-form [name=at]").fill("06:00")
    page.locator("#schedule-form").get_by_role("button", name="Add schedule").click()
    schedule = Schedule.objects.get()
    expect(page).to_have_url(re.compile(rf"/schedules/\?dataset=shop#schedule-{schedule.pk}$"))
    expect(page.locator("main .message.success")).to_have_text("Schedule shop/nightly added.")
    row = page.locator(f"#schedule-{schedule.pk}")
    expect(row).to_contain_text("daily 06:00 Europe/London")
    assert (schedule.kind, f"{schedule.at_time:%H:%M}", schedule.time_zone) == (
        "daily",
        "06:00",
        "Europe/London",
    )
    assert (schedule.manifest_source, schedule.catch_up, schedule.catch_up_max) == (
        str(manifest),
        "each",
        3,
    )
    assert _actions() == [("schedule_added", "adam")]

    # Edit: weekly on Wednesdays at 05:30, windows named by ISO week.
    row.get_by_role("link", name="Edit").click()
    expect(page.locator("h1")).to_have_text("Edit schedule shop/nightly")
    expect(page.locator("#schedule-form [name=at]")).to_have_value("06:00")
    page.locator("#schedule-form input[name=repeat][value=weekly]").check()
    page.locator("#schedule-form [name=weekday]").select_option("wed")
    page.locator("#schedule-form [name=at]").fill("05:30")
    page.locator("#schedule-form [name=window_format]").fill("%G-W%V")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("main .message.success")).to_have_text(
        "Schedule shop/nightly changed: recurrence, window_format."
    )
    expect(row).to_contain_text("weekly wed 05:30 Europe/London")
    schedule.refresh_from_db()
    assert (schedule.kind, schedule.weekday, f"{schedule.at_time:%H:%M}") == ("weekly", 3, "05:30")
    assert schedule.window_format == "%G-W%V"
    changed = AuditEntry.objects.get(action="schedule_changed")
    assert changed.actor == "adam"
    assert changed.detail["changed"]["window_format"] == ["%Y-%m-%d", "%G-W%V"]

    # Pause and resume by clicking.
    row.get_by_role("button", name="Pause").click()
    expect(row.locator(".state")).to_have_text("paused")
    assert Schedule.objects.get().paused
    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".state")).to_have_text("active")
    assert not Schedule.objects.get().paused
    assert [a for a, _ in _actions()] == [
        "schedule_added",
        "schedule_changed",
        "schedule_paused",
        "schedule_resumed",
    ]

    # The dispatcher's call, a fortnight on: the missed weeks' runs (each, at most 3).
    made = schedule_runs.run_due(timezone.now() + timedelta(days=15))
    assert made >= 2 and Run.objects.filter(dataset=dataset).count() == made
    Schedule.objects.update(last_error="2026-W50: https://x.test/m.csv: HTTP 503", failures=1)
    schedule.refresh_from_db()
    upcoming = schedules.overview([schedule], timezone.now())[0]["next_window"]

    # An operator sees the windows and the error, and no control at all.
    page.context.clear_cookies()
    log_in(page, live_server, "olivia")
    page.goto(f"{live_server.url}/schedules/")
    row = page.locator(f"#schedule-{schedule.pk}")
    expect(row.get_by_role("link", name=schedule.last_window)).to_have_attribute(
        "href", f"/runs/{schedule.last_run_id}/"
    )
    expect(row).to_contain_text(upcoming)
    expect(row).to_contain_text("HTTP 503")
    expect(page.locator("#schedules button")).to_have_count(0)
    expect(
        page.get_by_role("link", name=re.compile("^(Edit|Remove|Add a schedule)$"))
    ).to_have_count(0)
    screenshot(page, "schedules-operator")
    page.goto(f"{live_server.url}/datasets/shop/")
    page.locator("#dataset-schedules").get_by_role("link", name="nightly").click()
    expect(page).to_have_url(re.compile(rf"/schedules/\?dataset=shop#schedule-{schedule.pk}$"))

    # Remove, through the confirmation page: the runs stay.
    page.context.clear_cookies()
    log_in(page, live_server, "adam")
    page.goto(f"{live_server.url}/schedules/")
    page.locator(f"#schedule-{schedule.pk}").get_by_role("link", name="Remove").click()
    expect(page.locator("h1")).to_have_text("Remove schedule shop/nightly?")
    expect(page.locator("#consequences")).to_contain_text("The runs it made stay")
    assert Schedule.objects.exists()
    page.locator("#confirmation [name=reason]").fill("site closed")
    page.get_by_role("button", name="Yes, remove schedule shop/nightly").click()
    expect(page.locator("main .message.success")).to_have_text(
        "Schedule shop/nightly removed; its runs stay."
    )
    expect(page.locator("#schedules")).to_contain_text("No schedules yet")
    assert not Schedule.objects.exists()
    assert Run.objects.filter(dataset=dataset).count() == made
    removed = AuditEntry.objects.get(action="schedule_removed")
    assert (removed.actor, removed.reason) == ("adam", "site closed")


def test_an_admin_backfills_a_past_range_after_seeing_its_windows(
    transactional_db, live_server, page, screenshot, tmp_path
):
    make_users()
    dataset = make_dataset(name="shop")
    manifest = tmp_path / "shop.csv"
    manifest.write_text("url,page_type\nhttps://shop.test/p/1,product\n")
    call_command(
        "schedule", "add", "shop", "nightly", "--daily", "06:00", "--manifest", str(manifest)
    )
    schedule = Schedule.objects.get()
    today = timezone.now().date()
    first, last = today - timedelta(days=4), today - timedelta(days=2)
    existing = Run.objects.create(dataset=dataset, window=f"{today - timedelta(days=3)}")

    # Nothing ran since it was added two days ago: overdue, with the question to ask.
    Schedule.objects.update(created_at=timezone.now() - timedelta(days=2))
    log_in(page, live_server, "adam")
    page.goto(f"{live_server.url}/schedules/")
    row = page.locator(f"#schedule-{schedule.pk}")
    expect(row.locator(".state")).to_have_text("overdue")
    expect(row).to_contain_text("is a dispatcher running?")

    row.get_by_role("link", name="Backfill").click()
    expect(page.locator("h1")).to_have_text("Backfill schedule shop/nightly")
    page.locator("#backfill-form [name=start]").fill(f"{first}")
    page.locator("#backfill-form [name=stop]").fill(f"{last}")
    page.locator("#backfill-form [name=reason]").fill("dispatcher was down")
    page.get_by_role("button", name="Show the windows").click()
    windows = page.locator("#backfill-windows tbody tr")
    expect(windows).to_have_count(3)
    expect(windows.nth(1)).to_contain_text(f"run #{existing.pk} exists: adopted")
    screenshot(page, "schedule-backfill-confirm")
    assert Run.objects.filter(dataset=dataset).count() == 1  # nothing before the confirmation
    page.get_by_role("button", name="Yes, make 2 runs and adopt the rest").click()
    expect(page.locator("main .message.success")).to_contain_text("2 runs made")
    made = sorted(Run.objects.filter(dataset=dataset).values_list("window", flat=True))
    assert made == [f"{first}", f"{today - timedelta(days=3)}", f"{last}"]
    entry = AuditEntry.objects.get(action="schedule_backfilled")
    assert (entry.actor, entry.reason) == ("adam", "dispatcher was down")

    # Paused: the page says what that does to the windows due meanwhile.
    page.locator(f"#schedule-{schedule.pk}").get_by_role("button", name="Pause").click()
    row = page.locator(f"#schedule-{schedule.pk}")
    expect(row.locator(".state")).to_have_text("paused")
    expect(row).to_contain_text("windows due until it is resumed are skipped")
