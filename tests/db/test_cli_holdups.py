"""The command line names what failed (issue 29): `accept`'s refusal and `runstatus` list the
failing rules and the quarantined partitions, each with the rerun command."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from recovery.models import Run, Task
from recovery.quality import acceptance, holdups
from recovery.states.choices import RunState
from tests.support.acceptance import make_collected_run
from tests.support.factories import make_tasks

pytestmark = pytest.mark.django_db


def held_candidate() -> Run:
    """A candidate whose coverage fails: partition `c` is held by the partition rule (10 rows),
    partition `d` ended with 3 quarantined tasks (two login pages, one consent page)."""
    run = make_collected_run({"a": "good", "b": "good", "c": "bad"})
    d = make_tasks(run, 3, partition="d", state="quarantined", host="d.test")
    for task, error in zip(d, ("login_page", "consent_page", "login_page"), strict=True):
        Task.objects.filter(pk=task.pk).update(last_error_class=error)
    acceptance.advance_runs()
    run.refresh_from_db()
    assert run.acceptance_state == RunState.CANDIDATE
    return run


def refusal(*argv: str) -> CommandError:
    with pytest.raises(CommandError) as err:
        call_command(*argv)
    return err.value


def test_it_names_each_failing_rule_and_quarantined_partition_when_accept_refuses():
    run = held_candidate()
    err = refusal("accept", str(run.pk))
    assert err.returncode == 2
    text = str(err).splitlines()
    # The engine's line first (what the dashboard says), then the detail.
    assert text[0] == f"run {run.pk} fails its rules: coverage 0.606, needs ≥ 0.90"
    assert text[1:] == [
        "failing rules (at the last evaluation):",
        "  coverage 0.606, needs ≥ 0.90",
        "quarantined partitions (2), each rerun with:",
        "  c: rule partition_invalid_prices: 100.0% > 5.0% (10 rows held)",
        f"    manage.py rerun {run.pk} --partition c --reason TEXT",
        "  d: 3 quarantined (login_page 2, consent_page 1) of 3 tasks",
        f"    manage.py rerun {run.pk} --partition d --reason TEXT",
    ]
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.CANDIDATE


def test_the_printed_rerun_command_works():
    run = held_candidate()
    line = next(s for s in str(refusal("accept", str(run.pk))).splitlines() if "--partition d" in s)
    argv = line.split()[1:]  # without "manage.py"
    argv[argv.index("TEXT")] = "login wall fixed"
    out = io.StringIO()
    call_command(*argv, stdout=out)
    assert "3 tasks reset" in out.getvalue()


def test_runstatus_shows_the_same_lines():
    run = held_candidate()
    out = io.StringIO()
    call_command("runstatus", str(run.pk), stdout=out)
    text = out.getvalue()
    for line in holdups.lines(holdups.report(run)):
        assert line in text.splitlines()
    assert f"manage.py rerun {run.pk} --partition c --reason TEXT" in text
    out = io.StringIO()
    call_command("runstatus", str(run.pk), "--json", stdout=out)
    data = json.loads(out.getvalue())["holdups"]
    assert [r["rule"] for r in data["failing_rules"]] == ["coverage"]
    assert data["failing_rules"][0]["threshold"] == pytest.approx(0.9)
    c, d = data["partitions"]
    assert (c["name"], c["rows_held"], c["reason"].startswith("rule ")) == ("c", 10, True)
    assert (d["name"], d["quarantined_tasks"], d["reason"]) == ("d", 3, "")
    assert d["error_classes"] == {"login_page": 2, "consent_page": 1}
    assert data["more_partitions"] == 0 and data["error_classes_sampled"] is False


def test_runstatus_says_nothing_of_holdups_when_nothing_holds_the_run():
    run = make_collected_run({"a": "good"})
    acceptance.advance_runs()
    out = io.StringIO()
    call_command("runstatus", str(run.pk), stdout=out)
    assert "quarantined partitions" not in out.getvalue()
    assert "failing rules" not in out.getvalue()


def test_the_list_is_bounded_and_names_are_quoted_for_the_shell():
    run = make_collected_run({"a": "good"}, per_partition=2)
    for n in range(holdups.SHOWN + 4):
        make_tasks(run, 1, partition=f"shop {n:02d}", state="dead", host=f"s{n}.test")
    make_tasks(run, 2, partition="worst", state="quarantined", host="worst.test")
    acceptance.advance_runs()
    text = str(refusal("accept", str(run.pk)))
    assert f"quarantined partitions ({holdups.SHOWN + 5}), each rerun with:" in text
    # The most quarantined first; the others by name, up to SHOWN.
    assert text.index("  worst: 2 quarantined (unclassified 2) of 2 tasks") < text.index(
        "  shop 00: 1 dead of 1 task"
    )
    assert f"manage.py rerun {run.pk} --partition 'shop 00' --reason TEXT" in text
    assert "shop 18" in text and "shop 19" not in text  # worst + 19 others listed
    assert "  and 5 more (the run's quarantine page lists them all)" in text
