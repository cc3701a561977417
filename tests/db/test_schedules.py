"""Schedules (recovery.intake.schedules): one run per (dataset, window), across midnight, the clock
changes and missed windows, with time travelled by time-machine and the dispatcher's own call."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError

from recovery.intake import schedule_runs, schedules
from recovery.intake.recurrence import ScheduleError
from recovery.models import AuditEntry, Run, Schedule, Task
from recovery.ops.logs import redact
from recovery.sandbox.runner import start_in_thread
from tests.support.factories import make_dataset

pytestmark = pytest.mark.django_db


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "manifest.csv"
    path.write_text("url,page_type\nhttps://shop.test/p/1,product\nhttps://shop.test/p/2,product\n")
    return path


def make_schedule(dataset, manifest, *, created: datetime, **options) -> Schedule:
    recurrence = schedules.parse_recurrence(
        daily=options.pop("daily", None),
        weekly=options.pop("weekly", None),
        cron=options.pop("cron", None),
    )
    with time_machine.travel(created, tick=False):
        return schedules.add(
            dataset.name,
            options.pop("name", "nightly"),
            recurrence=recurrence,
            tz=options.pop("tz", "UTC"),
            window_format=options.pop("window_format", "%Y-%m-%d"),
            source=str(options.pop("source", manifest)),
            catch_up=options.pop("catch_up", "latest"),
            actor="test",
        )


def walk(start: datetime, end: datetime, step: timedelta) -> list[tuple[datetime, str]]:
    """Call the dispatcher's run_due at every step; (when, window) for each run made."""
    made: list[tuple[datetime, str]] = []
    now = start
    while now <= end:
        with time_machine.travel(now, tick=False):
            before = set(Run.objects.values_list("window", flat=True))
            schedule_runs.run_due()
            after = set(Run.objects.values_list("window", flat=True))
        made.extend((now, w) for w in sorted(after - before))
        now += step
    return made


def test_it_makes_each_days_run_once_at_its_local_time_across_midnight(manifest):
    dataset = make_dataset()
    zone = ZoneInfo("Europe/Paris")
    make_schedule(
        dataset, manifest, created=datetime(2026, 6, 1, 12, tzinfo=zone), daily="00:15", tz=zone.key
    )
    made = walk(
        datetime(2026, 6, 1, 23, 0, tzinfo=zone),
        datetime(2026, 6, 4, 1, 0, tzinfo=zone),
        timedelta(minutes=5),
    )
    assert [w for _when, w in made] == ["2026-06-02", "2026-06-03", "2026-06-04"]
    for when, window in made:  # made at the first call at or after 00:15 local of that day
        assert when.astimezone(zone).strftime("%Y-%m-%d %H:%M") == f"{window} 00:15"
    assert Run.objects.filter(dataset=dataset).count() == 3
    assert Task.objects.filter(run__dataset=dataset).count() == 6


@pytest.mark.parametrize(
    "zone_name, at, days",
    [
        # Spring forward: 01:30 does not exist in London on 29 March (01:00 GMT -> 02:00 BST).
        ("Europe/London", "01:30", ("2026-03-28", "2026-03-29", "2026-03-30")),
        # Fall back: 01:30 happens twice in London on 25 October.
        ("Europe/London", "01:30", ("2026-10-24", "2026-10-25", "2026-10-26")),
        # New York: 02:30 does not exist on 8 March; 01:30 happens twice on 1 November.
        ("America/New_York", "02:30", ("2026-03-07", "2026-03-08", "2026-03-09")),
        ("America/New_York", "01:30", ("2026-10-31", "2026-11-01", "2026-11-02")),
    ],
)
def test_it_makes_one_run_per_local_day_across_the_clock_changes(manifest, zone_name, at, days):
    dataset = make_dataset()
    zone = ZoneInfo(zone_name)
    first = datetime.fromisoformat(days[0]).replace(tzinfo=zone)
    make_schedule(dataset, manifest, created=first - timedelta(hours=12), daily=at, tz=zone_name)
    made = walk(first - timedelta(hours=1), first + timedelta(days=3), timedelta(minutes=10))
    assert [w for _when, w in made] == list(days)  # each local day once, none twice
    hours = [when.astimezone(zone).hour for when, _w in made]
    # Made within the hour after the local time (an hour later where it did not exist).
    assert all(h in (int(at[:2]), int(at[:2]) + 1) for h in hours), hours


@pytest.mark.parametrize(
    "catch_up, expected",
    [
        ("latest", ["2026-05-17"]),
        ("each:3", ["2026-05-15", "2026-05-16", "2026-05-17"]),
        ("each:30", [f"2026-05-{d}" for d in range(11, 18)]),
    ],
)
def test_a_missed_week_follows_the_catch_up_policy(manifest, catch_up, expected):
    dataset = make_dataset()
    make_schedule(
        dataset,
        manifest,
        created=datetime(2026, 5, 10, 12, tzinfo=UTC),
        daily="06:00",
        catch_up=catch_up,
    )
    with time_machine.travel(datetime(2026, 5, 10, 12, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 0
    # The dispatcher was down for a week; it comes back on 17 May at 07:00.
    with time_machine.travel(datetime(2026, 5, 17, 7, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == len(expected)
        assert schedule_runs.run_due() == 0  # and again: nothing more
    windows = list(
        Run.objects.filter(dataset=dataset).order_by("pk").values_list("window", flat=True)
    )
    assert windows == expected
    schedule = Schedule.objects.get(dataset=dataset)
    assert schedule.last_window == "2026-05-17"
    assert schedule.last_run.window == "2026-05-17"


def test_weekly_and_cron_windows_use_the_naming_rule(manifest):
    dataset = make_dataset()
    make_schedule(
        dataset,
        manifest,
        created=datetime(2026, 12, 20, tzinfo=UTC),
        weekly="mon 06:00",
        window_format="%G-W%V",
        name="weekly",
    )
    made = walk(
        datetime(2026, 12, 20, tzinfo=UTC), datetime(2027, 1, 12, tzinfo=UTC), timedelta(hours=6)
    )
    # ISO weeks: Monday 4 January 2027 is in week 1 of 2027, Monday 28 December in 2026-W53.
    assert [w for _when, w in made] == ["2026-W52", "2026-W53", "2027-W01", "2027-W02"]
    other = make_dataset()
    make_schedule(
        other,
        manifest,
        created=datetime(2026, 7, 1, tzinfo=UTC),
        cron="0 */6 * * *",
        window_format="%Y-%m-%dT%H",
        name="sixhourly",
    )
    made = walk(
        datetime(2026, 7, 1, 1, tzinfo=UTC), datetime(2026, 7, 2, 1, tzinfo=UTC), timedelta(hours=1)
    )
    assert [w for _when, w in made if Run.objects.get(window=w).dataset == other] == [
        "2026-07-01T06",
        "2026-07-01T12",
        "2026-07-01T18",
        "2026-07-02T00",
    ]


def test_a_window_whose_run_exists_is_adopted_not_duplicated(manifest):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    Run.objects.create(dataset=dataset, window="2026-05-01")  # e.g. made before a crash
    with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 0
    schedule = Schedule.objects.get(dataset=dataset)
    assert schedule.last_window == "2026-05-01"
    assert schedule.last_run.window == "2026-05-01"
    assert Run.objects.filter(dataset=dataset).count() == 1


def test_a_failed_manifest_is_recorded_and_retried_with_backoff_never_a_half_run(tmp_path):
    dataset = make_dataset()
    path = tmp_path / "later.csv"
    path.write_text("url\nhttps://shop.test/p/1\n")
    make_schedule(dataset, path, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    path.unlink()  # the upstream export did not arrive
    at = datetime(2026, 5, 1, 6, 1, tzinfo=UTC)
    with time_machine.travel(at, tick=False):
        assert schedule_runs.run_due() == 0
    schedule = Schedule.objects.get(dataset=dataset)
    assert schedule.failures == 1 and "2026-05-01" in schedule.last_error
    assert schedule.retry_at >= at + timedelta(seconds=schedule_runs.RETRY_BASE)
    assert schedule.last_due_at is None and not Run.objects.filter(dataset=dataset).exists()
    path.write_text("url\nhttps://shop.test/p/1\n")
    with time_machine.travel(at + timedelta(seconds=30), tick=False):
        assert schedule_runs.run_due() == 0  # not before its retry time
    with time_machine.travel(schedule.retry_at, tick=False):
        assert schedule_runs.run_due() == 1
    schedule.refresh_from_db()
    assert (schedule.failures, schedule.last_error, schedule.retry_at) == (0, "", None)


def test_an_http_manifest_comes_through_the_guarded_client(settings):
    from aiohttp import web

    served = {"status": 503}

    async def export(request):
        status = served["status"]
        return web.Response(status=status, text="url\nhttps://shop.test/p/9\n")

    app = web.Application()
    app.router.add_get("/export.csv", export)
    server = start_in_thread(app)
    try:
        dataset = make_dataset()
        url = f"{server.base_url}/export.csv"
        make_schedule(
            dataset, None, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00", source=url
        )
        with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
            assert schedule_runs.run_due() == 0
        schedule = Schedule.objects.get(dataset=dataset)
        assert "HTTP 503" in schedule.last_error
        served["status"] = 200
        with time_machine.travel(schedule.retry_at, tick=False):
            assert schedule_runs.run_due() == 1
        run = Run.objects.get(dataset=dataset)
        assert list(Task.objects.filter(run=run).values_list("url", flat=True)) == [
            "https://shop.test/p/9"
        ]
    finally:
        server.stop()


def test_previous_copies_the_last_windows_manifest_and_discoveries(manifest):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 1
    first = Run.objects.get(dataset=dataset, window="2026-05-01")
    parent = Task.objects.filter(run=first).first()
    Task.objects.create(
        run=first,
        task_key="k" * 64,
        url="https://shop.test/p/3",
        page_type="product",
        discovery="link",
        parent=parent,
    )
    Schedule.objects.filter(dataset=dataset).update(manifest_source=schedules.PREVIOUS)
    with time_machine.travel(datetime(2026, 5, 2, 7, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 1
    second = Run.objects.get(dataset=dataset, window="2026-05-02")
    assert sorted(Task.objects.filter(run=second).values_list("url", flat=True)) == [
        "https://shop.test/p/1",
        "https://shop.test/p/2",
        "https://shop.test/p/3",
    ]


def test_a_paused_schedule_makes_nothing_and_every_change_is_audited(manifest):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    assert schedules.set_paused(dataset.name, "nightly", True, actor="ops", reason="site down")
    with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 0
    assert schedules.set_paused(dataset.name, "nightly", False, actor="ops")
    with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
        assert schedule_runs.run_due() == 1
    schedules.remove(dataset.name, "nightly", actor="ops", reason="done")
    actions = list(AuditEntry.objects.order_by("pk").values_list("action", flat=True))
    assert [a for a in actions if a.startswith("schedule_")] == [
        "schedule_added",
        "schedule_paused",
        "schedule_resumed",
        "schedule_removed",
    ]
    assert Run.objects.filter(dataset=dataset).count() == 1  # its runs stay


@pytest.mark.parametrize(
    "args, field",
    [
        (["--daily", "25:00"], "daily"),
        (["--daily", "06:00", "--cron", "* * * * *"], "recurrence"),
        (["--weekly", "someday 06:00"], "weekly"),
        (["--cron", "not cron"], "cron"),
        (["--daily", "06:00", "--tz", "Mars/Base"], "tz"),
        (["--daily", "06:00", "--window-format", "daily"], "window_format"),
        (["--daily", "06:00", "--window-format", "%Y/%m/%d"], "window_format"),
        (["--daily", "06:00", "--catch-up", "all"], "catch_up"),
        (["--daily", "06:00", "--manifest-is", "x"], None),
    ],
)
def test_the_command_refuses_bad_input_with_code_2_naming_the_field(manifest, args, field):
    dataset = make_dataset()
    if "--manifest-is" in args:
        with pytest.raises(CommandError):
            call_command("schedule", "add", dataset.name, "n", *args)
        return
    with pytest.raises(CommandError) as info:
        call_command("schedule", "add", dataset.name, "n", "--manifest", str(manifest), *args)
    assert info.value.returncode == 2
    assert str(info.value).startswith(f"{field}:"), str(info.value)
    assert not Schedule.objects.exists()


def test_the_command_adds_lists_pauses_and_removes(manifest, capsys):
    dataset = make_dataset()
    with time_machine.travel(datetime(2026, 5, 1, 4, tzinfo=UTC), tick=False):  # 05:00 BST
        call_command(
            "schedule",
            "add",
            dataset.name,
            "nightly",
            "--daily",
            "06:00",
            "--tz",
            "Europe/London",
            "--manifest",
            str(manifest),
            "--catch-up",
            "each:2",
        )
        assert "next window 2026-05-01" in capsys.readouterr().out
        call_command("schedule", "list")
        out = capsys.readouterr().out
        assert "daily 06:00 Europe/London" in out and "next 2026-05-01" in out
    call_command("schedule", "pause", dataset.name, "nightly")
    assert "paused" in capsys.readouterr().out
    with pytest.raises(CommandError) as info:
        call_command("schedule", "pause", dataset.name, "nope")
    assert info.value.returncode == 2 and str(info.value).startswith("name:")
    call_command("schedule", "remove", dataset.name, "nightly")
    assert not Schedule.objects.exists()


def test_the_schedules_page_shows_windows_and_lets_only_admins_pause(manifest):
    from django.test import Client
    from django.urls import reverse

    from tests.support.world import make_users

    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00")
    with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
        schedule_runs.run_due()
    users = make_users()
    operator, admin = Client(), Client()
    operator.force_login(users["operator"])
    admin.force_login(users["admin"])
    with time_machine.travel(datetime(2026, 5, 1, 8, tzinfo=UTC), tick=False):
        html = operator.get(reverse("dashboard:schedules")).content.decode()
    run = Run.objects.get(dataset=dataset)
    assert f'href="/runs/{run.pk}/">2026-05-01</a>' in html  # the last window, linked
    assert "2026-05-02" in html  # the next window
    assert "Pause</button>" not in html
    with time_machine.travel(datetime(2026, 5, 1, 8, tzinfo=UTC), tick=False):
        page = operator.get(reverse("dashboard:dataset", kwargs={"name": dataset.name}))
    text = page.content.decode()
    assert ">nightly</a></strong>: daily 06:00 UTC, next window 2026-05-02" in text
    assert f'last window <a href="/runs/{run.pk}/">2026-05-01</a>' in text
    schedule = Schedule.objects.get(dataset=dataset)
    url = reverse("dashboard:schedule_toggle", kwargs={"schedule_id": schedule.pk})
    assert operator.post(url).status_code == 403
    assert admin.post(url, {"reason": "site migration"}, follow=True).status_code == 200
    schedule.refresh_from_db()
    assert schedule.paused
    entry = AuditEntry.objects.get(action="schedule_paused")
    assert (entry.actor, entry.reason) == (users["admin"].username, "site migration")
    html = admin.get(reverse("dashboard:schedules")).content.decode()
    assert "Resume</button>" in html


def test_a_credential_written_in_a_manifest_url_is_refused_and_nothing_stored():
    dataset = make_dataset()
    for source, what in [
        ("https://ops:HUNTER2@feeds.test/m.csv", "a user or password"),
        ("https://ghp_TOKENAS_USER@feeds.test/m.csv", "a user or password"),
        ("https://ops:${SALVAGE_MANIFEST_PW}@feeds.test/m.csv", "refused by the fetcher"),
        ("https://feeds.test/m.csv?format=csv&access_token=TOKEN-ONE", "'access_token'"),
        ("https://feeds.test/m.csv?X-Amz-Signature=SIGNED", "'X-Amz-Signature'"),
    ]:
        with pytest.raises(schedules.ScheduleErrors) as refused:
            schedules.check_settings(
                daily="06:00", tz="UTC", window_format="%Y-%m-%d", source=source,
                catch_up="latest",
            )  # fmt: skip
        message = str(refused.value)
        assert what in message and "${SALVAGE_MANIFEST_<NAME>}" in message, message
        for secret in ("HUNTER2", "TOKENAS", "TOKEN-ONE", "SIGNED"):
            assert secret not in message
    # Only the deployment's own manifest variables are filled in, and a sitemap takes none.
    for source, why in [
        ("https://feeds.test/m.csv?token=${SECRET_KEY}", "only ${SALVAGE_MANIFEST_<NAME>}"),
        ("sitemap:https://x.test/s.xml?token=${SALVAGE_MANIFEST_T}", "takes no credential"),
    ]:
        with pytest.raises(ScheduleError, match=re.escape(why)):
            schedules.check_source(source)
    assert not Schedule.objects.filter(dataset=dataset).exists()
    # A query without a credential, or with each as a placeholder, is stored as written.
    for source in (
        "https://feeds.test/m.csv?format=csv&page=2",
        "https://feeds.test/m.csv?api_key=${SALVAGE_MANIFEST_A}${SALVAGE_MANIFEST_B}",
    ):
        assert schedules.check_source(source) == source


def test_a_manifest_credential_comes_from_the_environment_and_is_stored_nowhere(monkeypatch):
    from aiohttp import web

    served = {"status": 200}

    async def export(request):
        if request.query.get("token") != "TOKEN-ONE":
            return web.Response(status=401, text="who are you")
        return web.Response(status=served["status"], text="url\nhttps://shop.test/p/7\n")

    app = web.Application()
    app.router.add_get("/export.csv", export)
    server = start_in_thread(app)
    try:
        dataset = make_dataset()
        host = server.base_url.split("://", 1)[1]
        source = f"http://{host}/export.csv?format=csv&token=${{SALVAGE_MANIFEST_TOKEN}}"
        make_schedule(
            dataset, None, created=datetime(2026, 5, 1, tzinfo=UTC), daily="06:00", source=source
        )
        # Not set yet: the schedule fails, names the variable, and is retried.
        with time_machine.travel(datetime(2026, 5, 1, 7, tzinfo=UTC), tick=False):
            assert schedule_runs.run_due() == 0
        schedule = Schedule.objects.get(dataset=dataset)
        assert "SALVAGE_MANIFEST_TOKEN is not set" in schedule.last_error
        monkeypatch.setenv("SALVAGE_MANIFEST_TOKEN", "TOKEN-ONE")
        served["status"] = 503  # a failing fetch quotes the source as stored
        with time_machine.travel(schedule.retry_at, tick=False):
            assert schedule_runs.run_due() == 0
        schedule.refresh_from_db()
        assert "HTTP 503" in schedule.last_error
        served["status"] = 200
        with time_machine.travel(schedule.retry_at, tick=False):
            made = schedule_runs.run_due()
        schedule.refresh_from_db()
        assert made == 1, schedule.last_error
        run = Run.objects.get(dataset=dataset)
        assert list(Task.objects.filter(run=run).values_list("url", flat=True)) == [
            "https://shop.test/p/7"
        ]
        schedule.refresh_from_db()
        assert schedule.manifest_source == source  # the placeholders, as written
        stored = repr(list(AuditEntry.objects.values_list("action", "reason", "detail")))
        stored += schedule.manifest_source + schedule.last_error + repr(run.__dict__)
        assert "TOKEN-ONE" not in stored, stored
        # And the logs: the variable's value is redacted wherever a line quotes it.
        assert redact("failed: TOKEN-ONE was refused") == "failed: [redacted] was refused"
    finally:
        server.stop()
