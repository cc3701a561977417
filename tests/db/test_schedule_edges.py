"""Schedules at their edges (issue 30): window formats that repeat are refused when saved, one
DST rule for daily and cron alike, pausing skips the windows it covers, an overdue schedule says
so. Time travelled by time-machine; runs made by the dispatcher's own call (run_due)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from recovery.intake import recurrence, schedule_runs, schedules
from recovery.models import AuditEntry, Run, Schedule
from tests.db.test_schedules import make_schedule, walk
from tests.support.factories import make_dataset
from tests.support.world import make_users

pytestmark = pytest.mark.django_db

TODAY = datetime(2026, 12, 2, 9, 20, tzinfo=UTC)


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "manifest.csv"
    path.write_text("url,page_type\nhttps://shop.test/p/1,product\n")
    return path


def _refusal(dataset, manifest, *args: str) -> str:
    with pytest.raises(CommandError) as info:
        call_command("schedule", "add", dataset.name, "n", "--manifest", str(manifest), *args)
    assert info.value.returncode == 2
    assert not Schedule.objects.exists()
    return str(info.value)


# --- 3. a window format that repeats is refused when saved ---------------------------------


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["--daily", "06:00", "--window-format", "%H"],
            "window format '%H' repeats: 2026-12-03 06:00 and 2026-12-04 06:00 are both '06'",
        ),
        (
            ["--daily", "06:00", "--window-format", "%A"],
            "window format '%A' repeats: 2026-12-03 06:00 and 2026-12-10 06:00 are both 'Thursday'",
        ),
        (
            ["--weekly", "mon 06:00", "--window-format", "%Y-%m"],
            "window format '%Y-%m' repeats: 2026-12-07 06:00 and 2026-12-14 06:00 are both "
            "'2026-12'",
        ),
        # Twice a day named by the day: the 18:00 instant would make no run of its own.
        (
            ["--cron", "0 6,18 * * *"],
            "window format '%Y-%m-%d' repeats: 2026-12-03 06:00 and 2026-12-03 18:00 are both "
            "'2026-12-03'",
        ),
        # Beyond the next 1,000 instants (16 hours of minutes): the next day's 00:00.
        (
            ["--cron", "* * * * *", "--window-format", "%H:%M"],
            "window format '%H:%M' repeats: 2026-12-03 00:00 and 2026-12-04 00:00 are both '00:00'",
        ),
        # A yearly repeat, beyond the next 1,000 hourly instants.
        (
            ["--cron", "0 * * * *", "--window-format", "%m-%dT%H"],
            "window format '%m-%dT%H' repeats: 2026-12-03 00:00 and 2027-12-03 00:00 are both "
            "'12-03T00'",
        ),
        # The fall-back hour, eleven months ahead: only the zone's abbreviation tells it apart.
        (
            ["--cron", "0 * * * *", "--tz", "Europe/London", "--window-format", "%Y-%m-%dT%H"],
            "window format '%Y-%m-%dT%H' repeats: 2027-10-31 01:00 BST and 2027-10-31 01:00 GMT "
            "are both '2027-10-31T01' (add %Z, the zone's abbreviation, or name windows in UTC: "
            "--tz UTC)",
        ),
        (
            ["--cron", "*/30 * * * *", "--tz", "America/New_York", "--window-format", "%dT%H:%M"],
            "window format '%dT%H:%M' repeats: 2026-12-03 00:00 and 2027-01-03 00:00 are both "
            "'03T00:00'",
        ),
        (
            ["--cron", "*/30 * * * *", "--tz", "America/New_York", "--window-format", "%FT%H:%M"],
            "window format '%FT%H:%M' repeats: 2027-11-07 01:00 EDT and 2027-11-07 01:00 EST are "
            "both '2027-11-07T01:00' (add %Z, the zone's abbreviation, or name windows in UTC: "
            "--tz UTC)",
        ),
        # Valid in UTC, not in the zone: the window names are checked where they are made.
        (
            ["--daily", "06:00", "--tz", "Asia/Dubai", "--window-format", "%Y-%m-%d%Z"],
            "'%Y-%m-%d%Z' makes '2026-12-03+04' for 2026-12-03 06:00 +04: windows use 1 to 64 of "
            "A-Z a-z 0-9 . _ : -",
        ),
    ],
)
def test_a_window_format_that_repeats_is_refused_naming_the_repeat(manifest, args, says):
    dataset = make_dataset()
    with time_machine.travel(TODAY, tick=False):
        assert _refusal(dataset, manifest, *args) == f"window_format: {says}"


@pytest.mark.parametrize(
    "args",
    [
        ["--daily", "06:00"],
        ["--weekly", "mon 06:00", "--window-format", "%G-W%V"],
        ["--cron", "0 */6 * * *", "--window-format", "%Y-%m-%dT%H"],
        ["--cron", "0 * * * *", "--tz", "Europe/London", "--window-format", "%Y-%m-%dT%H%Z"],
        ["--cron", "*/15 * * * *", "--tz", "America/New_York", "--window-format", "%FT%H:%M%Z"],
        ["--cron", "* * * * *", "--window-format", "%Y-%m-%dT%H:%M"],
        # 01:30 is due once on the fall-back day (its first pass): one window a day is enough.
        ["--daily", "01:30", "--tz", "Europe/London"],
        ["--cron", "30 1 * * *", "--tz", "Europe/London"],
    ],
)
def test_a_window_format_that_names_each_instant_once_is_accepted(manifest, args):
    dataset = make_dataset()
    with time_machine.travel(TODAY, tick=False):
        call_command("schedule", "add", dataset.name, "n", "--manifest", str(manifest), *args)
    assert Schedule.objects.filter(dataset=dataset).count() == 1


def test_the_page_refuses_a_repeating_format_with_the_commands_message(manifest):
    dataset = make_dataset()
    with time_machine.travel(TODAY, tick=False):
        says = _refusal(dataset, manifest, "--daily", "06:00", "--window-format", "%H")
        client = Client()
        client.force_login(make_users()["admin"])
        post = {
            "dataset": dataset.name,
            "name": "n",
            "repeat": "daily",
            "at": "06:00",
            "tz": "UTC",
            "window_format": "%H",
            "manifest": "previous",
            "catch_up": "latest",
        }
        response = client.post(reverse("dashboard:schedule_add"), post)
        assert response.status_code == 400
        assert dict(response.context["form"].errors) == {"window_format": [says]}
        schedule = schedules.create(dataset.name, "ok", _daily(), actor="cli")
        edit = reverse("dashboard:schedule_edit", kwargs={"schedule_id": schedule.pk})
        assert client.post(edit, post).status_code == 400
    schedule.refresh_from_db()
    assert schedule.window_format == "%Y-%m-%d"
    assert not AuditEntry.objects.filter(action="schedule_changed").exists()


def _daily(**overrides) -> schedules.Settings:
    options = {"daily": "06:00", "tz": "UTC", "window_format": "%Y-%m-%d"}
    return schedules.check_settings(**options | {"source": "previous", "catch_up": "latest"})


def test_a_repeating_format_saved_before_the_check_is_reported_not_silent(manifest):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    Schedule.objects.filter(dataset=dataset).update(window_format="%H")
    made = walk(
        datetime(2026, 5, 1, 5, tzinfo=UTC), datetime(2026, 5, 3, 7, tzinfo=UTC), timedelta(hours=1)
    )
    assert [w for _when, w in made] == ["06"]
    schedule = Schedule.objects.get(dataset=dataset)
    assert schedule.last_error == (
        "window format '%H' repeats: 2026-05-02 06:00 UTC and 2026-05-03 06:00 UTC are both "
        "'06', so no run was made for 2026-05-03 06:00 UTC; change the window format"
    )
    assert schedule.last_due_at == datetime(2026, 5, 3, 6, tzinfo=UTC)


def test_an_edit_that_names_the_last_window_again_is_no_repeat(manifest):
    """An edit keeps the schedule's place: its last window is not made again, and that is no
    window format's fault, so no error is recorded."""
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    walk(datetime(2026, 5, 1, 7, tzinfo=UTC), datetime(2026, 5, 1, 7, tzinfo=UTC), timedelta(1))
    evening = schedules.check_settings(
        cron="0 18 * * *",
        tz="UTC",
        window_format="%Y-%m-%d",
        source=str(manifest),
        catch_up="latest",
        now=datetime(2026, 5, 1, 12, tzinfo=UTC),
    )
    schedules.change(dataset.name, "nightly", evening, paused=False, actor="ops")
    made = walk(
        datetime(2026, 5, 1, 12, tzinfo=UTC),
        datetime(2026, 5, 2, 19, tzinfo=UTC),
        timedelta(hours=1),
    )
    assert [w for _when, w in made] == ["2026-05-02"]
    assert Schedule.objects.get(dataset=dataset).last_error == ""


# --- 5. one DST rule for daily and cron alike -----------------------------------------------

# London changes at 01:00 UTC: on 29 March 2026 01:00-01:59 local is skipped, on 25 October it
# happens twice. New York changes at 02:00 local: on 8 March 2026 02:00-02:59 is skipped, on
# 1 November 01:00-01:59 happens twice. A skipped time is due at the first instant after the
# gap; a repeated one at its first pass; the times around them as usual.
DST = [
    ("Europe/London", "01:30", "2026-03-28", ["01:30 GMT", "02:00 BST", "01:30 BST"]),
    ("Europe/London", "02:30", "2026-03-28", ["02:30 GMT", "02:30 BST", "02:30 BST"]),
    ("Europe/London", "01:30", "2026-10-24", ["01:30 BST", "01:30 BST", "01:30 GMT"]),
    ("America/New_York", "02:30", "2026-03-07", ["02:30 EST", "03:00 EDT", "02:30 EDT"]),
    ("America/New_York", "01:30", "2026-03-07", ["01:30 EST", "01:30 EST", "01:30 EDT"]),
    ("America/New_York", "01:30", "2026-10-31", ["01:30 EDT", "01:30 EDT", "01:30 EST"]),
]


@pytest.mark.parametrize("kind", ["daily", "cron"])
@pytest.mark.parametrize("zone_name, at, first, expected", DST)
def test_daily_and_cron_follow_one_dst_rule(manifest, kind, zone_name, at, first, expected):
    dataset = make_dataset()
    zone = ZoneInfo(zone_name)
    start = datetime.fromisoformat(first).replace(tzinfo=zone).astimezone(UTC)
    hour, minute = at.split(":")
    recur = {"daily": at} if kind == "daily" else {"cron": f"{int(minute)} {int(hour)} * * *"}
    make_schedule(dataset, manifest, created=start - timedelta(hours=12), tz=zone_name, **recur)
    schedule = Schedule.objects.get(dataset=dataset)
    instants = list(recurrence.occurrences(schedule, start, start + timedelta(days=3)))
    assert [f"{i.astimezone(zone):%H:%M %Z}" for i in instants] == expected
    # The dispatcher, checking every half hour, makes each day's run once, at that instant.
    made = walk(start, start + timedelta(days=3), timedelta(minutes=30))
    days = [f"{date.fromisoformat(first) + timedelta(days=d)}" for d in range(3)]
    assert made == list(zip(instants, days, strict=True))


@pytest.mark.parametrize(
    "zone_name, start, windows",
    [
        ("Europe/London", "2026-10-25T00:00+01:00", ["00BST", "01BST", "01GMT", "02GMT"]),
        ("America/New_York", "2026-11-01T00:00-04:00", ["00EDT", "01EDT", "01EST", "02EST"]),
        # Through the gap: the skipped hour is one instant, the first after it.
        ("Europe/London", "2026-03-29T00:00+00:00", ["00GMT", "02BST", "03BST"]),
        ("America/New_York", "2026-03-08T01:00-05:00", ["01EST", "03EDT", "04EDT"]),
    ],
)
def test_an_hourly_cron_collects_both_passes_of_the_repeated_hour(
    manifest, zone_name, start, windows
):
    dataset = make_dataset()
    at = datetime.fromisoformat(start)
    make_schedule(
        dataset,
        manifest,
        created=at - timedelta(minutes=1),
        cron="0 * * * *",
        tz=zone_name,
        window_format="%Y-%m-%dT%H%Z",
        catch_up="each:10",
    )
    made = walk(at, at + timedelta(hours=len(windows) - 1), timedelta(minutes=15))
    assert [w for _when, w in made] == [f"{start[:10]}T{hour}" for hour in windows]
    assert Run.objects.filter(dataset=dataset).count() == len(windows)


# --- 4. pausing skips the windows it covers ---------------------------------------------------


@pytest.mark.parametrize("catch_up", ["latest", "each:5"])
def test_windows_due_while_paused_are_skipped_on_resume(manifest, catch_up):
    dataset = make_dataset()
    make_schedule(
        dataset,
        manifest,
        created=datetime(2026, 5, 1, tzinfo=UTC),
        daily="06:00",
        catch_up=catch_up,
    )
    walk(datetime(2026, 5, 1, 7, tzinfo=UTC), datetime(2026, 5, 1, 7, tzinfo=UTC), timedelta(1))
    with time_machine.travel(datetime(2026, 5, 1, 12, tzinfo=UTC), tick=False):
        assert schedules.set_paused(dataset.name, "nightly", True, actor="ops")
    # 2, 3 and 4 May fall due while it is paused; it is resumed on 4 May at noon.
    with time_machine.travel(datetime(2026, 5, 4, 12, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 0
        assert schedules.set_paused(dataset.name, "nightly", False, actor="ops")
    made = walk(
        datetime(2026, 5, 4, 12, 1, tzinfo=UTC),
        datetime(2026, 5, 5, 7, tzinfo=UTC),
        timedelta(minutes=30),
    )
    assert [w for _when, w in made] == ["2026-05-05"]
    windows = Run.objects.filter(dataset=dataset).order_by("window")
    assert list(windows.values_list("window", flat=True)) == ["2026-05-01", "2026-05-05"]
    entry = AuditEntry.objects.get(action="schedule_resumed")
    assert entry.detail == {"skipped": 3, "skipped_windows": ["2026-05-02", "2026-05-04"]}


def test_a_resume_moves_the_place_past_the_skipped_windows(manifest):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    walk(datetime(2026, 5, 1, 7, tzinfo=UTC), datetime(2026, 5, 1, 7, tzinfo=UTC), timedelta(1))
    with time_machine.travel(datetime(2026, 5, 1, 12, tzinfo=UTC), tick=False):
        schedules.set_paused(dataset.name, "nightly", True, actor="ops")
    with time_machine.travel(datetime(2026, 5, 4, 12, tzinfo=UTC), tick=False):
        schedules.set_paused(dataset.name, "nightly", False, actor="ops")
    schedule = Schedule.objects.get(dataset=dataset)
    # What reads the place (metrics, the attention view) sees nothing due, nothing overdue.
    assert schedule.last_due_at == datetime(2026, 5, 4, 12, tzinfo=UTC)  # the resume
    assert schedule.last_window == "2026-05-01"
    assert recurrence.overdue(schedule, datetime(2026, 5, 4, 13, tzinfo=UTC)) is None
    assert recurrence.skipped_by_pause(schedule)[0] == (
        datetime(2026, 5, 2, 6, tzinfo=UTC),
        "2026-05-02",
    )


def test_a_window_missed_before_the_pause_is_still_made(manifest):
    """The pause skips the windows due while paused, not one that was due before it."""
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    # No dispatcher ran on 1 May; the schedule is paused at noon, resumed on 3 May at noon.
    with time_machine.travel(datetime(2026, 5, 1, 12, tzinfo=UTC), tick=False):
        schedules.set_paused(dataset.name, "nightly", True, actor="ops")
    with time_machine.travel(datetime(2026, 5, 3, 12, tzinfo=UTC), tick=False):
        schedules.set_paused(dataset.name, "nightly", False, actor="ops")
        schedule = Schedule.objects.get(dataset=dataset)
        assert recurrence.overdue(schedule, datetime(2026, 5, 3, 12, tzinfo=UTC)) == (
            datetime(2026, 5, 1, 6, tzinfo=UTC),
            "2026-05-01",
        )
    made = walk(
        datetime(2026, 5, 3, 12, 1, tzinfo=UTC),
        datetime(2026, 5, 4, 7, tzinfo=UTC),
        timedelta(minutes=30),
    )
    assert [w for _when, w in made] == ["2026-05-01", "2026-05-04"]


def test_a_schedule_added_paused_skips_what_fell_due_before_its_resume(manifest):
    dataset = make_dataset()
    with time_machine.travel(datetime(2026, 5, 1, tzinfo=UTC), tick=False):
        schedules.create(dataset.name, "nightly", _daily(), paused=True, actor="ops")
    with time_machine.travel(datetime(2026, 5, 3, 12, tzinfo=UTC), tick=False):
        assert schedules.change(dataset.name, "nightly", _daily(), paused=False, actor="ops") == {
            "state": ["paused", "active"]
        }
        assert schedule_runs.run_due() == 0
    entry = AuditEntry.objects.get(action="schedule_changed")
    assert entry.detail["skipped"] == 3


def test_the_page_and_the_command_state_what_a_pause_does(manifest, capsys):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    with time_machine.travel(datetime(2026, 5, 1, 12, tzinfo=UTC), tick=False):
        call_command("schedule", "pause", dataset.name, "nightly")
    assert capsys.readouterr().out.splitlines() == [
        f"schedule {dataset.name}/nightly paused",
        "windows due until it is resumed are skipped: no run is made for them",
    ]
    client = Client()
    client.force_login(make_users()["admin"])
    page = client.get(reverse("dashboard:schedules")).content.decode()
    assert "windows due until it is resumed are skipped" in page
    form = client.get(reverse("dashboard:schedule_add")).content.decode()
    assert "Paused (windows due until it is resumed are skipped: no run is made for them)" in form
    call_command("schedule", "list")
    assert "paused since 2026-05-01 12:00 UTC (windows due meanwhile are skipped)" in (
        capsys.readouterr().out
    )
    with time_machine.travel(datetime(2026, 5, 3, 12, tzinfo=UTC), tick=False):
        call_command("schedule", "resume", dataset.name, "nightly")
    assert capsys.readouterr().out.splitlines() == [
        f"schedule {dataset.name}/nightly active",
        "2 windows due while it was paused skipped (2026-05-02 to 2026-05-03)",
    ]


# --- 6. an overdue schedule says so -----------------------------------------------------------


def test_a_window_due_past_the_grace_without_its_run_is_overdue(manifest, settings):
    settings.SALVAGE_SCHEDULE_CHECK_SECONDS = 10.0  # grace: a minute (twice 10 s is less)
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    schedule = Schedule.objects.get(dataset=dataset)
    due = (datetime(2026, 5, 1, 6, tzinfo=UTC), "2026-05-01")
    assert recurrence.overdue_grace() == timedelta(minutes=1)
    assert recurrence.overdue(schedule, datetime(2026, 5, 1, 6, 0, 59, tzinfo=UTC)) is None
    assert recurrence.overdue(schedule, datetime(2026, 5, 1, 6, 8, tzinfo=UTC)) == due
    # Two days without a dispatcher: overdue since the oldest window it missed.
    assert recurrence.overdue(schedule, datetime(2026, 5, 3, 7, tzinfo=UTC)) == due
    settings.SALVAGE_SCHEDULE_CHECK_SECONDS = 300.0  # a slow check: twice that
    assert recurrence.overdue(schedule, datetime(2026, 5, 1, 6, 8, tzinfo=UTC)) is None
    with time_machine.travel(datetime(2026, 5, 1, 6, 8, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 1
    schedule.refresh_from_db()
    assert recurrence.overdue(schedule, datetime(2026, 5, 1, 6, 8, tzinfo=UTC)) is None
    Schedule.objects.filter(pk=schedule.pk).update(paused=True)
    schedule.refresh_from_db()
    assert recurrence.overdue(schedule, datetime(2026, 5, 9, tzinfo=UTC)) is None


def test_the_page_and_the_list_show_an_overdue_schedule(manifest, capsys):
    dataset = make_dataset()
    make_schedule(
        dataset,
        manifest,
        created=datetime(2026, 5, 1, tzinfo=UTC),
        cron="*/10 * * * *",
        window_format="%Y-%m-%dT%H:%M",
    )
    schedule = Schedule.objects.get(dataset=dataset)
    client = Client()
    client.force_login(make_users()["operator"])
    # No dispatcher alive: the 00:10 window is 8 minutes old, the next one due in 2 minutes.
    with time_machine.travel(datetime(2026, 5, 1, 0, 18, tzinfo=UTC), tick=False):
        page = client.get(reverse("dashboard:schedules")).content.decode()
        call_command("schedule", "list")
    assert f'id="overdue-{schedule.pk}"' in page
    assert "8 min ago" in page and "(window 2026-05-01T00:10): is a dispatcher running?" in page
    out = capsys.readouterr().out
    assert "overdue: 2026-05-01T00:10 due 2026-05-01 00:10 UTC, no run made" in out
    # A manifest that fails: the page points at the error instead.
    Schedule.objects.filter(pk=schedule.pk).update(last_error="2026-05-01T00:10: no such file")
    with time_machine.travel(datetime(2026, 5, 1, 0, 18, tzinfo=UTC), tick=False):
        page = client.get(reverse("dashboard:schedules")).content.decode()
    assert "(window 2026-05-01T00:10): its manifest fails, see the last error" in page
    # Once the dispatcher made it: on time again.
    with time_machine.travel(datetime(2026, 5, 1, 0, 18, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 1
        page = client.get(reverse("dashboard:schedules")).content.decode()
    assert f'id="overdue-{schedule.pk}"' not in page
