"""Acceptance: candidate when every task is terminal, accept only when the rules pass."""

from __future__ import annotations

import pytest

from recovery.models import AuditEntry, Observation, OutboxEvent, Run, RunPartition, Task
from recovery.quality import acceptance
from recovery.states import row_states
from recovery.states.choices import RunState
from tests.support.acceptance import make_collected_run, make_shop
from tests.support.factories import make_run, make_tasks
from tests.support.held_rows import held_run

pytestmark = pytest.mark.django_db


def test_it_waits_for_every_task_to_be_terminal():
    run = make_run(make_shop())
    make_tasks(run, 2, state="committed")
    make_tasks(run, 1, partition="p2", state="pending")
    assert acceptance.advance_runs() == 0
    run.refresh_from_db()
    assert run.acceptance_state == RunState.COLLECTING


def test_it_makes_a_candidate_and_accepts_it_with_an_outbox_event():
    run = make_collected_run({"a": "good", "b": "good"})
    assert acceptance.advance_runs() == 1
    run.refresh_from_db()
    assert run.acceptance_state == RunState.CANDIDATE
    assert set(Observation.objects.filter(run=run).values_list("validation_state", flat=True)) == {
        "valid"
    }
    acceptance.accept_run(run.pk, "admin")
    run.refresh_from_db()
    assert run.acceptance_state == RunState.ACCEPTED
    assert run.accepted_by == "admin"
    event = OutboxEvent.objects.get(run=run)
    assert event.event_type == "accepted" and event.state == "unsent"
    assert event.payload["observations"] == 20
    assert AuditEntry.objects.filter(action="accept_run", object_id=str(run.pk)).exists()


def test_it_quarantines_a_bad_partition_and_refuses_acceptance_without_changing_tasks():
    run = make_collected_run({"a": "good", "b": "good", "c": "bad"})
    acceptance.advance_runs()
    part = RunPartition.objects.get(run=run, name="c")
    assert part.quarantined and part.quarantine_reason.startswith("rule ")
    # c's rows are held by the quarantine; each keeps its own verdict.
    held = Observation.objects.filter(run=run, partition="c")
    assert set(held.values_list("validation_state", flat=True)) == {"invalid"}
    assert row_states.state_counts(run.pk) == {"valid": 20, "held": 10}
    # Coverage is 20/30 < 0.9: the rules fail and acceptance is refused.
    with pytest.raises(acceptance.AcceptanceError, match="coverage"):
        acceptance.accept_run(run.pk, "admin")
    assert not OutboxEvent.objects.filter(run=run).exists()
    # A quality failure never turns a completed task into a failed one.
    assert set(Task.objects.filter(run=run).values_list("state", flat=True)) == {"committed"}


def test_it_rejects_with_a_reason_only():
    run = make_collected_run({"a": "bad"})
    acceptance.advance_runs()
    with pytest.raises(acceptance.AcceptanceError, match="reason"):
        acceptance.reject_run(run.pk, "admin", " ")
    acceptance.reject_run(run.pk, "admin", "prices are zero")
    run.refresh_from_db()
    assert run.acceptance_state == RunState.REJECTED
    assert run.state_reason == "prices are zero"


def test_it_publishes_only_an_accepted_run():
    run = make_collected_run({"a": "good"})
    acceptance.advance_runs()
    with pytest.raises(acceptance.AcceptanceError, match="only an accepted run"):
        acceptance.publish_run(run.pk, "admin")
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.PUBLISHED
    kinds = sorted(OutboxEvent.objects.filter(run=run).values_list("event_type", flat=True))
    assert kinds == ["accepted", "published"]


def test_it_auto_accepts_when_the_dataset_says_so():
    run = make_collected_run({"a": "good"}, dataset=make_shop(auto_accept=True))
    acceptance.advance_runs()
    run.refresh_from_db()
    assert run.acceptance_state == RunState.ACCEPTED
    assert run.accepted_by == "system"


def test_an_auto_accepted_run_is_evaluated_once_from_candidate_to_accepted(monkeypatch):
    """Issue 15: the rules are evaluated once on the way (make_candidate's evaluation), not
    again by the auto-accept; the real evaluation runs, only counted."""
    from recovery.quality import validation

    calls = []
    real = validation.evaluate

    def counted(run_id, **kw):
        calls.append(run_id)
        return real(run_id, **kw)

    monkeypatch.setattr(validation, "evaluate", counted)
    run = make_collected_run({"a": "good"}, dataset=make_shop(auto_accept=True))
    acceptance.advance_runs()
    run.refresh_from_db()
    assert run.acceptance_state == RunState.ACCEPTED
    assert calls == [run.pk]
    # An operator's accept still judges the data as it is now.
    other = make_collected_run({"a": "good"})
    acceptance.advance_runs()
    acceptance.accept_run(other.pk, "admin")
    assert calls == [run.pk, other.pk, other.pk]


def test_it_refuses_unknown_runs():
    with pytest.raises(acceptance.AcceptanceError, match="does not exist"):
        acceptance.accept_run(999999, "admin")


def test_the_commands_exit_2_on_refusals():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    run = make_collected_run({"a": "bad"}, per_partition=3)
    acceptance.advance_runs()
    for argv in (
        ["accept", str(run.pk)],
        ["publish", str(run.pk)],
        ["reject", str(run.pk), "--reason", " "],
        ["rerun", str(run.pk), "--reason", "x"],
        ["rerun", str(run.pk), "--partition", "nope", "--reason", "x"],
        ["accept", "no-such@run"],
    ):
        with pytest.raises(CommandError) as err:
            call_command(*argv)
        assert err.value.returncode == 2, argv
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.CANDIDATE


def test_a_misconfigured_destination_does_not_block_acceptance(settings):
    from recovery.delivery import outbox

    settings.SALVAGE_DESTINATION = "ftp://nowhere"
    settings.SALVAGE_OUTBOX_WAKE = False
    run = make_collected_run({"a": "good"}, per_partition=2)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    outbox.deliver_due()
    event = OutboxEvent.objects.get(run=run)
    assert event.state == "failed" and "ftp://nowhere" in event.last_error


def test_the_published_event_counts_a_quarantined_partitions_rows_as_held():
    # Held is the partition's quarantine, not a stored verdict: rows judged valid or invalid
    # in a quarantined partition are neither published nor counted invalid.
    run = make_run(make_shop(), acceptance_state=RunState.ACCEPTED)
    held_run(run)
    acceptance.publish_run(run.pk, "admin")
    payload = OutboxEvent.objects.get(run=run, event_type="published").payload
    assert (payload["observations"], payload["held"], payload["invalid"]) == (2, 3, 1)
