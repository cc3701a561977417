"""Backfill (recovery.intake.backfill): a schedule's windows over an explicit past range, from the
command line and the Schedules page (admins, behind a confirmation naming the windows); each
window once, an existing run adopted, never duplicated; audited."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from recovery.intake import backfill, schedule_runs
from recovery.management.commands._accept_cli import actor
from recovery.models import AuditEntry, Run, Schedule, Task
from tests.db.test_schedules import make_schedule
from tests.support.factories import make_dataset, make_run
from tests.support.world import make_users

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 5, 12, 10, tzinfo=UTC)


@pytest.fixture
def manifest(tmp_path):
    path = tmp_path / "manifest.csv"
    path.write_text("url,page_type\nhttps://shop.test/p/1,product\nhttps://shop.test/p/2,product\n")
    return path


@pytest.fixture
def nightly(manifest):
    dataset = make_dataset()
    make_schedule(dataset, manifest, created=datetime(2026, 5, 10, tzinfo=UTC), daily="06:00")
    return dataset


def _windows(dataset) -> list[str]:
    return list(
        Run.objects.filter(dataset=dataset).order_by("window").values_list("window", flat=True)
    )


def test_the_command_makes_each_window_once_and_adopts_existing_runs(nightly, capsys):
    by_hand = make_run(nightly, window="2026-05-03")  # a createrun before the backfill
    with time_machine.travel(NOW, tick=False):
        call_command(
            "schedule", "backfill", nightly.name, "nightly", "--from", "2026-05-01",
            "--to", "2026-05-05", "--reason", "site was down",
        )  # fmt: skip
    assert capsys.readouterr().out.strip() == (
        f"backfill of {nightly.name}/nightly: 4 runs made (2026-05-01, 2026-05-02, 2026-05-04, "
        "2026-05-05), 1 adopted (2026-05-03)"
    )
    assert _windows(nightly) == [f"2026-05-0{d}" for d in range(1, 6)]
    assert Task.objects.filter(run__dataset=nightly).count() == 8  # 2 per made run
    entry = AuditEntry.objects.get(action="schedule_backfilled")
    # The operating-system user who ran it (issue 29), as every command's audit names it.
    assert (entry.actor, entry.reason) == (actor(None), "site was down")
    assert entry.actor.startswith("cli")
    assert entry.detail["made"] == ["2026-05-01", "2026-05-02", "2026-05-04", "2026-05-05"]
    assert entry.detail["adopted"] == ["2026-05-03"]
    assert entry.detail["start"] == "2026-05-01T00:00:00+00:00"
    assert entry.detail["stop"] == "2026-05-06T00:00:00+00:00"
    # Again: every window adopted, nothing made twice; the hand-made run is untouched.
    with time_machine.travel(NOW, tick=False):
        result = backfill.backfill(nightly.name, "nightly", "2026-05-01", "2026-05-05", actor="x")
    assert (result.made, len(result.adopted)) == ([], 5)
    assert Run.objects.filter(dataset=nightly).count() == 5
    assert Run.objects.get(pk=by_hand.pk).window == "2026-05-03"
    # The schedule's own place did not move.
    schedule = Schedule.objects.get(dataset=nightly)
    assert (schedule.last_due_at, schedule.last_window) == (None, "")


def test_a_dry_run_lists_the_windows_and_makes_nothing(nightly, capsys):
    run = make_run(nightly, window="2026-05-02")
    with time_machine.travel(NOW, tick=False):
        call_command(
            "schedule", "backfill", nightly.name, "nightly", "--from", "2026-05-01T07:00",
            "--to", "2026-05-03T06:00", "--dry-run",
        )  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        f"2026-05-02\t2026-05-02 06:00 UTC\tadopt run {run.pk}",
        "2026-05-03\t2026-05-03 06:00 UTC\tmake",  # a --to with a time includes it
    ]
    assert _windows(nightly) == ["2026-05-02"]
    assert not AuditEntry.objects.filter(action="schedule_backfilled").exists()


def test_the_range_is_cut_at_now_and_the_dispatcher_adopts_what_it_made(nightly):
    with time_machine.travel(NOW, tick=False):
        result = backfill.backfill(nightly.name, "nightly", "2026-05-10", "2026-05-20", actor="x")
        assert result.made == ["2026-05-10", "2026-05-11", "2026-05-12"]  # 13 May: not yet due
        # The dispatcher's own catch-up finds 12 May made: adopted, not duplicated.
        assert schedule_runs.run_due() == 0
    schedule = Schedule.objects.get(dataset=nightly)
    assert schedule.last_window == "2026-05-12"
    assert Run.objects.filter(dataset=nightly).count() == 3


@pytest.mark.parametrize(
    "start, stop, says",
    [
        ("2026-05-05", "2026-05-01", "to: '2026-05-01' is not after --from '2026-05-05'"),
        (
            "2026-06-01",
            "2026-06-02",
            "from: '2026-06-01' is in the future: a backfill makes windows already due "
            "(the dispatcher makes the rest)",
        ),
        (
            "2026-01-01",
            "2026-05-01",
            "to: the range holds more than 100 windows: backfill it in parts",
        ),
        (
            "yesterday",
            "2026-05-01",
            "from: 'yesterday': use a date (2026-11-01) or a date and time (2026-11-01T06:00)",
        ),
        (
            "2026-05-01T07:00",
            "2026-05-01T08:00",
            "from: no window of daily 06:00 UTC falls due from 2026-05-01T07:00 to "
            "2026-05-01T08:00",
        ),
    ],
)
def test_the_command_refuses_a_bad_range_with_code_2(nightly, start, stop, says):
    with time_machine.travel(NOW, tick=False), pytest.raises(CommandError) as info:
        call_command("schedule", "backfill", nightly.name, "nightly", "--from", start, "--to", stop)
    assert (info.value.returncode, str(info.value)) == (2, says)
    assert not Run.objects.filter(dataset=nightly).exists()


def test_a_manifest_that_fails_stops_the_backfill_with_code_1(nightly, manifest):
    with time_machine.travel(NOW, tick=False):
        backfill.backfill(nightly.name, "nightly", "2026-05-01", "2026-05-01", actor="x")
        manifest.unlink()
        with pytest.raises(CommandError) as info:
            call_command(
                "schedule", "backfill", nightly.name, "nightly", "--from", "2026-05-01",
                "--to", "2026-05-02",
            )  # fmt: skip
    assert info.value.returncode == 1
    assert "0 runs made, 1 adopted (2026-05-01); stopped at window 2026-05-02:" in str(info.value)
    assert _windows(nightly) == ["2026-05-01"]
    entry = AuditEntry.objects.filter(action="schedule_backfilled").latest("pk")
    assert entry.detail["failed"][0] == "2026-05-02"


# --- the page ---------------------------------------------------------------------------------


@pytest.fixture
def clients(db):
    users = make_users()
    admin, operator = Client(), Client()
    admin.force_login(users["admin"])
    operator.force_login(users["operator"])
    return admin, operator


def test_the_page_confirms_the_windows_then_backfills_them(nightly, clients):
    admin, operator = clients
    existing = make_run(nightly, window="2026-05-02")
    schedule = Schedule.objects.get(dataset=nightly)
    url = reverse("dashboard:schedule_backfill", kwargs={"schedule_id": schedule.pk})
    asked = {"start": "2026-05-01", "stop": "2026-05-03", "reason": "outage"}
    with time_machine.travel(NOW, tick=False):
        assert operator.get(url).status_code == 403
        assert operator.post(url, {**asked, "confirmed": "1"}).status_code == 403
        listed = admin.get(reverse("dashboard:schedules")).content.decode()
        assert f'href="{url}">Backfill</a>' in listed
        assert 'id="backfill-form"' in admin.get(url).content.decode()
        page = admin.post(url, asked).content.decode()
        assert "3 windows, 2 runs to make" in page
        assert f'<a href="/runs/{existing.pk}/">run #{existing.pk}</a> exists: adopted' in page
        for window in ("2026-05-01", "2026-05-02", "2026-05-03"):
            assert f'<input type="hidden" name="window" value="{window}">' in page
        assert _windows(nightly) == ["2026-05-02"]  # nothing made before the confirmation
        windows = ["2026-05-01", "2026-05-02", "2026-05-03"]
        done = admin.post(url, {**asked, "confirmed": "1", "window": windows}, follow=True)
    assert done.status_code == 200
    said = [str(m) for m in done.context["messages"]]
    assert said == [
        f"backfill of {schedule}: 2 runs made (2026-05-01, 2026-05-03), 1 adopted (2026-05-02)."
    ]
    assert _windows(nightly) == windows
    entry = AuditEntry.objects.get(action="schedule_backfilled")
    assert (entry.actor, entry.reason) == ("adam", "outage")


def test_the_page_refuses_a_bad_range_or_windows_that_changed(nightly, clients):
    admin, _operator = clients
    schedule = Schedule.objects.get(dataset=nightly)
    url = reverse("dashboard:schedule_backfill", kwargs={"schedule_id": schedule.pk})
    with time_machine.travel(NOW, tick=False):
        bad = admin.post(url, {"start": "2026-05-05", "stop": "2026-05-01"})
        assert bad.status_code == 400
        assert dict(bad.context["form"].errors) == {
            "stop": ["to: '2026-05-01' is not after --from '2026-05-05'"]
        }
        # Confirmed for two windows, but the range now names three: nothing is made.
        stale = admin.post(
            url,
            {"start": "2026-05-01", "stop": "2026-05-03", "confirmed": "1",
             "window": ["2026-05-01", "2026-05-02"]},
            follow=True,
        )  # fmt: skip
    said = [str(m) for m in stale.context["messages"]]
    assert len(said) == 1 and "are not the ones you confirmed" in said[0]
    assert _windows(nightly) == []
    assert not AuditEntry.objects.filter(action="schedule_backfilled").exists()
