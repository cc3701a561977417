"""Recovery batches: selection, reset, reopen, completion and revalidation."""

from __future__ import annotations

import pytest

from recovery.models import AuditEntry, RecoveryBatch, Run, RunPartition, Task, ValidationResult
from recovery.quality import acceptance, reruns
from recovery.states.choices import RunState
from tests.support.acceptance import (
    commit_task,
    good_payload,
    make_collected_run,
    make_shop,
)
from tests.support.factories import make_run, make_tasks
from tests.support.held_rows import held_run

pytestmark = pytest.mark.django_db


def batch(run, **kw) -> RecoveryBatch:
    values = {"reason": "selector fixed", "scraper_version": "2", "actor": "admin"}
    values.update(kw)
    return reruns.create_recovery_batch(run.pk, **values)


def test_it_resets_exactly_the_selected_partition_and_reopens_a_rejected_run():
    run = make_collected_run({"a": "good", "b": "bad"})
    acceptance.advance_runs()
    acceptance.reject_run(run.pk, "admin", "retailer b prices are zero")
    before = {t.pk: t.state for t in Task.objects.filter(run=run, partition="a")}
    b = batch(run, partitions=["b"])
    assert b.task_count == 10 and b.scraper_version == "2"
    assert set(b.partition_hashes_before) == {"a"}
    assert {t.pk: t.state for t in Task.objects.filter(run=run, partition="a")} == before
    reset = Task.objects.filter(run=run, partition="b")
    assert set(reset.values_list("state", flat=True)) == {"pending"}
    assert set(reset.values_list("recovery_batch_id", flat=True)) == {b.pk}
    run.refresh_from_db()
    assert run.acceptance_state == RunState.COLLECTING
    assert run.manifest_frozen_at is not None
    entry = AuditEntry.objects.get(action="create_recovery_batch", object_id=str(b.pk))
    assert entry.reason == "selector fixed" and entry.actor == "admin"


def test_it_selects_by_failed_rule():
    run = make_collected_run({"a": "good", "b": "bad", "c": "good"})
    acceptance.advance_runs()
    b = batch(run, rules=["partition_invalid_prices"])
    assert b.selection["touched_partitions"] == ["b"]
    assert set(b.partition_hashes_before) == {"a", "c"}


def test_a_rule_on_rows_selects_the_tasks_whose_rows_it_failed():
    # Seed 002: rerun "those task keys". A consent page in the bad partition produced no row,
    # so a repaired selector cannot recover it: the rule's selection leaves it out, and the
    # partition's selection keeps it.
    run = make_collected_run({"a": "good", "b": "bad"}, per_partition=10)
    consent = make_tasks(run, 1, partition="b", host="b.test", state="quarantined")[0]
    Task.objects.filter(pk=consent.pk).update(last_error_class="consent_page")
    acceptance.advance_runs()
    rows = set(Task.objects.filter(run=run, partition="b", state="committed").values_list("pk"))
    assert reruns.preview_recovery_batch(run.pk, partitions=["b"]).tasks == 11
    b = batch(run, rules=["partition_invalid_prices"])
    assert b.task_count == 10
    assert set(Task.objects.filter(recovery_batch=b).values_list("pk")) == rows
    assert Task.objects.get(pk=consent.pk).state == "quarantined"


def test_it_selects_by_page_type_and_error_class():
    run = make_run(make_shop())
    make_tasks(run, 2, state="quarantined", page_type="product")
    make_tasks(run, 3, state="committed", page_type="product")
    make_tasks(run, 1, partition="p2", state="quarantined", page_type="listing")
    Task.objects.filter(run=run, state="quarantined").update(last_error_class="selector_failure")
    b = batch(run, error_classes=["selector_failure"], page_types=["product"])
    assert b.task_count == 2  # AND across kinds
    assert Task.objects.filter(run=run, state="pending").count() == 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({}, "select tasks"),
        ({"partitions": ["a"], "reason": " "}, "reason"),
        ({"partitions": ["a"], "scraper_version": ""}, "scraper version"),
        ({"partitions": ["zzz"]}, "partition 'zzz' is not in run"),
        ({"rules": ["nope"]}, "rule 'nope' is not a rule"),
        ({"rules": ["coverage"]}, "no partition of run"),
        ({"error_classes": ["network"]}, "no terminal task"),  # valid, matches nothing
        ({"error_classes": ["bogus"]}, r"unknown error class 'bogus'; valid: .*selector_failure"),
        ({"error_classes": ["network", "Network"]}, "unknown error class 'Network'"),
        ({"page_types": ["gizmo"]}, r"unknown page type 'gizmo'; valid: .*product"),
    ],
)
def test_it_refuses_bad_selections_and_changes_nothing(kw, message):
    run = make_collected_run({"a": "good"}, per_partition=3)
    acceptance.advance_runs()
    with pytest.raises(reruns.RerunError, match=message):
        batch(run, **kw)
    assert not RecoveryBatch.objects.exists()
    assert set(Task.objects.filter(run=run).values_list("state", flat=True)) == {"committed"}
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.CANDIDATE


def test_the_command_names_the_unknown_value_and_lists_the_valid_ones():
    from django.core.management import CommandError, call_command

    run = make_collected_run({"a": "good"}, per_partition=2)
    acceptance.advance_runs()
    for option, value, listed in (
        ("--error-class", "bogus", "blocked_url, budget_exhausted"),
        ("--page-type", "gizmo", "valid: product"),
    ):
        with pytest.raises(CommandError) as err:
            call_command("rerun", str(run.pk), option, value, "--reason", "typo")
        assert err.value.returncode == 2
        assert repr(value) in str(err.value) and listed in str(err.value)
    assert not RecoveryBatch.objects.exists()


def test_the_command_creates_a_batch_from_the_archive_and_says_so(capsys):
    from django.core.management import call_command

    run = make_collected_run({"a": "good", "b": "bad"}, per_partition=2)
    acceptance.advance_runs()
    call_command("rerun", str(run.pk), "--partition", "b", "--reason", "fixed", "--from-archive")
    out = capsys.readouterr().out
    assert "2 tasks reset" in out and "re-extracted from the page archive where kept" in out
    b = RecoveryBatch.objects.get(run=run)
    assert b.from_archive
    entry = AuditEntry.objects.get(action="create_recovery_batch", object_id=str(b.pk))
    assert entry.detail["from_archive"] is True
    # Without the flag a batch fetches, as before.
    call_command("rerun", str(run.pk), "--partition", "a", "--reason", "again")
    assert not RecoveryBatch.objects.exclude(pk=b.pk).get().from_archive


def test_it_refuses_an_unknown_run():
    with pytest.raises(reruns.RerunError, match="does not exist"):
        reruns.create_recovery_batch(
            424242, partitions=["a"], reason="x", scraper_version="2", actor="a"
        )


def test_it_completes_revalidates_and_leaves_the_run_for_acceptance():
    run = make_collected_run({"a": "good", "b": "good", "c": "bad"})
    acceptance.advance_runs()
    assert RunPartition.objects.get(run=run, name="c").quarantined
    b = batch(run, partitions=["c"])
    assert acceptance.advance_runs() == 0  # tasks still pending
    for task in Task.objects.filter(recovery_batch=b):
        commit_task(task, good_payload(task))
    assert acceptance.advance_runs() == 2  # the batch completed, the run became candidate
    b.refresh_from_db()
    assert b.state == "completed" and b.completed_at
    assert not RunPartition.objects.get(run=run, name="c").quarantined
    assert reruns.untouched_unchanged(b) == {"a": True, "b": True}
    run.refresh_from_db()
    assert run.acceptance_state == RunState.CANDIDATE
    acceptance.accept_run(run.pk, "admin")


def test_a_rule_on_rows_selects_every_committed_task_of_a_quarantined_partition():
    # The rows of a quarantined partition are held whatever their stored verdict, so a data
    # rule's rerun takes them all; elsewhere only the rows judged invalid (not the valid
    # ones, not the unjudged one).
    run = make_run(make_shop(), acceptance_state=RunState.CANDIDATE)
    tasks = held_run(run)
    for partition in ("good", "bad"):
        ValidationResult.objects.create(
            run=run, rule="price_positive", partition=partition, passed=False, value=0.5
        )
    preview = reruns.preview_recovery_batch(run.pk, rules=["price_positive"])
    assert preview.by_partition == {"good": 1, "bad": 3}
    b = batch(run, rules=["price_positive"])
    expected = {tasks["good"][2].pk} | {t.pk for t in tasks["bad"]}
    assert set(Task.objects.filter(recovery_batch=b).values_list("pk", flat=True)) == expected
