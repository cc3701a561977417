"""Commands audit as the operating-system user who ran them (issue 29): `cli:<user>` from one
helper (management/commands/_accept_cli.actor), or the name `--actor` gives; never `system`."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from recovery.models import AuditEntry
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def os_user(monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    return "cli:alice"


def test_createrun_is_audited_with_the_operating_system_user(os_user, tmp_path):
    run = make_collected_run({"a": "good"}, per_partition=1)
    manifest = tmp_path / "urls.txt"
    manifest.write_text("https://shop.test/p/1\n")
    call_command(
        "createrun",
        run.dataset.name,
        "--window",
        "w2",
        "--manifest",
        str(manifest),
        stdout=io.StringIO(),
    )
    assert AuditEntry.objects.get(action="run_created").actor == os_user


def test_schedule_changes_are_audited_with_the_operating_system_user(os_user, tmp_path):
    run = make_collected_run({"a": "good"}, per_partition=1)
    manifest = tmp_path / "urls.txt"
    manifest.write_text("https://shop.test/p/1\n")
    name = run.dataset.name
    call_command(
        "schedule", "add", name, "daily", "--daily", "06:00", "--manifest", str(manifest),
        stdout=io.StringIO(),
    )  # fmt: skip
    call_command("schedule", "pause", name, "daily", stdout=io.StringIO())
    call_command("schedule", "remove", name, "daily", "--actor", "bob", stdout=io.StringIO())
    actors = dict(
        AuditEntry.objects.filter(action__startswith="schedule_").values_list("action", "actor")
    )
    assert actors["schedule_added"] == os_user
    assert actors["schedule_removed"] == "bob"
    assert {a for action, a in actors.items() if "pause" in action} == {os_user}


def test_accept_refused_or_not_is_audited_with_the_operating_system_user(os_user):
    run = make_collected_run({"a": "good"})
    acceptance.advance_runs()
    call_command("accept", str(run.pk), stdout=io.StringIO())
    assert AuditEntry.objects.get(action="accept_run").actor == os_user
