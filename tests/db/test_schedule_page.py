"""The Schedules page's add, edit and remove (dashboard.schedule_views): the command's rules and
messages beside the fields, nothing written on a refusal, every change audited, removal only
through its confirmation page, and the dataset page's links to its schedules."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from recovery.intake import schedules
from recovery.models import AuditEntry, Run, Schedule
from tests.support.factories import make_dataset, make_run
from tests.support.world import make_users

pytestmark = pytest.mark.django_db

GOOD = {
    "repeat": "daily",
    "at": "06:00",
    "weekday": "mon",
    "cron": "",
    "tz": "UTC",
    "window_format": "%Y-%m-%d",
    "manifest": "previous",
    "catch_up": "latest",
    "catch_up_max": "",
}


@pytest.fixture
def admin(db):
    users = make_users()
    client = Client()
    client.force_login(users["admin"])
    client.users = users
    return client


@pytest.fixture
def manifest_dir(settings, tmp_path):
    settings.SALVAGE_SCHEDULE_MANIFEST_DIR = tmp_path / "manifests"
    settings.SALVAGE_SCHEDULE_MANIFEST_DIR.mkdir()
    return settings.SALVAGE_SCHEDULE_MANIFEST_DIR


def _errors(response) -> dict[str, list[str]]:
    return {k: list(v) for k, v in response.context["form"].errors.items()}


def _command_says(*args: str) -> str:
    with pytest.raises(CommandError) as info:
        call_command("schedule", "add", *args)
    assert info.value.returncode == 2
    return str(info.value)


@pytest.mark.parametrize(
    "form, option, field",
    [
        ({"at": "25:00"}, ["--daily", "25:00"], "at"),
        ({"at": ""}, ["--daily", ""], "at"),
        ({"repeat": "weekly", "weekday": "tue", "at": "6pm"}, ["--weekly", "tue 6pm"], "at"),
        ({"repeat": "cron", "cron": "not cron"}, ["--cron", "not cron"], "cron"),
        ({"tz": "Mars/Base"}, ["--daily", "06:00", "--tz", "Mars/Base"], "tz"),
        (
            {"window_format": "%Y/%m/%d"},
            ["--daily", "06:00", "--window-format", "%Y/%m/%d"],
            "window_format",
        ),
        (
            {"catch_up": "each", "catch_up_max": "400"},
            ["--daily", "06:00", "--catch-up", "each:400"],
            "catch_up",
        ),
        (
            {"manifest": "ftp://x/m.csv"},
            ["--daily", "06:00", "--manifest", "ftp://x/m.csv"],
            "manifest",
        ),
    ],
)
def test_it_refuses_what_the_command_refuses_with_its_message_beside_the_field(
    admin, form, option, field
):
    dataset = make_dataset()
    args = [dataset.name, "nightly", *option]
    if "--manifest" not in option:
        args += ["--manifest", "previous"]
    says = _command_says(*args)
    before = AuditEntry.objects.count()
    response = admin.post(
        reverse("dashboard:schedule_add"),
        {**GOOD, **form, "dataset": dataset.name, "name": "nightly"},
    )
    assert response.status_code == 400
    assert _errors(response) == {field: [says]}
    assert f'id="error-{field}"' in response.content.decode()
    assert not Schedule.objects.exists()
    assert AuditEntry.objects.count() == before


def test_it_shows_every_bad_field_at_once_and_a_taken_name(admin):
    dataset = make_dataset()
    bad = {**GOOD, "dataset": dataset.name, "name": "bad name", "at": "7", "tz": "Nowhere"}
    response = admin.post(reverse("dashboard:schedule_add"), bad)
    assert set(_errors(response)) == {"name", "at", "tz"}
    schedules.create(dataset.name, "nightly", _settings(), actor="cli")
    taken = admin.post(
        reverse("dashboard:schedule_add"), {**GOOD, "dataset": dataset.name, "name": "nightly"}
    )
    assert _errors(taken) == {"name": [f"name: {dataset.name} already has a schedule 'nightly'"]}
    assert Schedule.objects.count() == 1


def _settings(**overrides) -> schedules.Settings:
    options = {"daily": "06:00", "tz": "UTC", "window_format": "%Y-%m-%d"}
    options |= {"source": "previous", "catch_up": "latest"} | overrides
    return schedules.check_settings(**options)


def test_a_browser_manifest_file_must_be_in_the_manifest_directory(admin, manifest_dir, tmp_path):
    dataset = make_dataset()
    outside = tmp_path / "secret.txt"
    outside.write_text("SECRET=1\n")
    inside = manifest_dir / "daily.csv"
    inside.write_text("url\nhttps://shop.test/p/1\n")
    post = {**GOOD, "dataset": dataset.name, "name": "nightly"}
    refused = admin.post(reverse("dashboard:schedule_add"), {**post, "manifest": str(outside)})
    assert _errors(refused) == {
        "manifest": [f"manifest: {str(outside)!r}: a file must be under {manifest_dir}"]
    }
    assert not Schedule.objects.exists()
    admin.post(reverse("dashboard:schedule_add"), {**post, "manifest": str(inside)})
    assert Schedule.objects.get().manifest_source == str(inside)
    # The command line may name any file; an edit in the browser keeps it, but cannot name one.
    call_command(
        "schedule", "add", dataset.name, "cli", "--daily", "07:00", "--manifest", str(outside)
    )
    cli = Schedule.objects.get(name="cli")
    edit = reverse("dashboard:schedule_edit", kwargs={"schedule_id": cli.pk})
    kept = admin.post(edit, {**GOOD, "at": "08:00", "manifest": str(outside)})
    assert kept.status_code == 302
    cli.refresh_from_db()
    assert (cli.at_time.hour, cli.manifest_source) == (8, str(outside))
    other = tmp_path / "other.txt"
    other.write_text("https://shop.test/p/2\n")
    assert admin.post(edit, {**GOOD, "manifest": str(other)}).status_code == 400


def test_an_edit_writes_the_new_settings_and_audits_what_changed(admin):
    dataset = make_dataset()
    schedule = schedules.create(dataset.name, "nightly", _settings(), actor="cli")
    Schedule.objects.filter(pk=schedule.pk).update(
        last_window="2026-05-01", last_error="boom", retry_at="2099-01-01T00:00Z"
    )
    url = reverse("dashboard:schedule_edit", kwargs={"schedule_id": schedule.pk})
    page = admin.get(url).content.decode()
    assert 'value="06:00"' in page and "Save changes" in page
    response = admin.post(
        url,
        {**GOOD, "repeat": "weekly", "weekday": "wed", "tz": "Europe/Paris", "paused": "on"},
        follow=True,
    )
    assert response.status_code == 200
    schedule.refresh_from_db()
    assert (schedule.kind, schedule.weekday, schedule.time_zone) == ("weekly", 3, "Europe/Paris")
    assert schedule.paused and schedule.retry_at is None  # the next check tries the new settings
    assert schedule.last_window == "2026-05-01"  # it keeps its place
    entry = AuditEntry.objects.get(action="schedule_changed")
    assert entry.actor == "adam" and entry.object_id == str(schedule.pk)
    assert entry.detail["changed"] == {
        "recurrence": ["daily 06:00 UTC", "weekly wed 06:00 Europe/Paris"],
        "state": ["active", "paused"],
    }
    # The same settings again: nothing written, nothing audited.
    again = admin.post(
        url, {**GOOD, "repeat": "weekly", "weekday": "wed", "tz": "Europe/Paris", "paused": "on"}
    )
    assert again.status_code == 302
    assert AuditEntry.objects.filter(action="schedule_changed").count() == 1
    # A bad edit writes nothing either.
    bad = admin.post(url, {**GOOD, "cron": "x", "repeat": "cron"})
    assert _errors(bad) == {"cron": ["cron: 'x' is not a 5-field cron expression"]}
    schedule.refresh_from_db()
    assert schedule.kind == "weekly"


def test_removal_goes_through_its_confirmation_page(admin):
    dataset = make_dataset()
    schedule = schedules.create(dataset.name, "nightly", _settings(), actor="cli")
    run = make_run(dataset, window="2026-05-01")
    Schedule.objects.filter(pk=schedule.pk).update(last_run=run, last_window="2026-05-01")
    url = reverse("dashboard:schedule_remove", kwargs={"schedule_id": schedule.pk})
    page = admin.get(url).content.decode()
    assert f"Remove schedule {schedule}?" in page
    assert f"the last one is run #{run.pk}, window 2026-05-01" in page
    # Not confirmed, or confirmed without a reason: the page again, nothing removed.
    assert admin.post(url, {"reason": "x"}).status_code == 200
    assert admin.post(url, {"confirmed": "1"}).status_code == 200
    assert Schedule.objects.filter(pk=schedule.pk).exists()
    assert not AuditEntry.objects.filter(action="schedule_removed").exists()
    done = admin.post(url, {"confirmed": "1", "reason": "site closed"})
    assert done.status_code == 302
    assert not Schedule.objects.exists()
    assert Run.objects.filter(pk=run.pk).exists()  # its runs stay
    entry = AuditEntry.objects.get(action="schedule_removed")
    assert (entry.actor, entry.reason, entry.detail["recurrence"]) == (
        "adam",
        "site closed",
        "daily 06:00 UTC",
    )


def test_the_dataset_page_links_its_schedules(admin):
    dataset = make_dataset()
    schedule = schedules.create(dataset.name, "nightly", _settings(), actor="cli")
    operator = Client()
    operator.force_login(admin.users["operator"])
    url = reverse("dashboard:dataset", kwargs={"name": dataset.name})
    listed = f'href="/schedules/?dataset={dataset.name}#schedule-{schedule.pk}">nightly</a>'
    edit = f'href="/schedules/{schedule.pk}/edit"'
    add = f'href="/schedules/new?dataset={dataset.name}"'
    as_admin = admin.get(url).content.decode()
    assert listed in as_admin and edit in as_admin and add in as_admin
    as_operator = operator.get(url).content.decode()
    assert listed in as_operator and edit not in as_operator and add not in as_operator
    # The list filtered to the dataset shows its schedules only, each row with its dataset.
    other = make_dataset()
    schedules.create(other.name, "other", _settings(), actor="cli")
    page = operator.get(reverse("dashboard:schedules"), {"dataset": dataset.name}).content.decode()
    assert re.findall(r'data-dataset="([^"]+)"', page) == [dataset.name]
    assert "Edit</a>" not in page and "Remove</a>" not in page and "Add a schedule" not in page
