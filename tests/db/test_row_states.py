"""quality.row_states: a row's state as shown, held derived from its partition's quarantine."""

from __future__ import annotations

import pytest

from recovery.models import Observation, RunPartition
from recovery.states import row_states
from tests.support.factories import make_run, make_tasks
from tests.support.held_rows import SHOWN, held_run, observe

pytestmark = pytest.mark.django_db


def test_it_counts_every_row_of_a_quarantined_partition_as_held_whatever_its_verdict():
    run = make_run()
    held_run(run)
    assert row_states.state_counts(run.pk) == SHOWN


def test_it_leaves_out_states_without_rows_and_counts_nothing_of_an_empty_run():
    run = make_run()
    for task in make_tasks(run, 2, partition="good", state="committed"):
        observe(task, "valid")
    assert row_states.state_counts(run.pk) == {"valid": 2}
    assert row_states.state_counts(make_run().pk) == {}


def test_it_still_counts_a_row_stored_held_as_held():
    # Rows an older evaluation marked 'held' keep counting held after their partition's
    # release, until the next evaluation judges them again.
    run = make_run()
    task = make_tasks(run, 1, partition="good", state="committed")[0]
    observe(task, "valid")
    Observation.objects.filter(source_task=task).update(validation_state="held")
    assert row_states.state_counts(run.pk) == {"held": 1}


def test_a_release_changes_the_counts_without_touching_a_row():
    run = make_run()
    held_run(run)
    before = list(Observation.objects.filter(run=run).values_list("pk", "validation_state"))
    RunPartition.objects.filter(run=run, name="bad").update(quarantined=False)
    assert row_states.state_counts(run.pk) == {"valid": 4, "invalid": 2, "pending": 1}
    assert list(Observation.objects.filter(run=run).values_list("pk", "validation_state")) == (
        before
    )


def test_it_exports_only_valid_rows_outside_quarantined_partitions():
    run = make_run()
    tasks = held_run(run)
    exported = set(row_states.exportable(run.pk).values_list("source_task_id", flat=True))
    assert exported == {tasks["good"][0].pk, tasks["good"][1].pk}


def test_the_rows_in_id_order_are_the_exportable_rows_of_that_run_only():
    # exportable_by_id names the run through ANY(...) on PostgreSQL (to keep the run-led index
    # in the plan): the same rows as exportable, in id order, and none of another run's.
    run, other = make_run(), make_run()
    held_run(run)
    for task in make_tasks(other, 2, partition="good", state="committed"):
        observe(task, "valid")
    ids = list(row_states.exportable(run.pk).order_by("pk").values_list("pk", flat=True))
    assert len(ids) == 2
    assert list(row_states.exportable_by_id(run.pk).values_list("pk", flat=True)) == ids
    assert (
        list(row_states.exportable_by_id(run.pk).filter(pk__gt=ids[0]).values_list("pk", flat=True))
        == ids[1:]
    )


def test_not_valid_is_every_row_but_the_exportable_ones():
    run = make_run()
    tasks = held_run(run)
    rows = Observation.objects.filter(run=run)
    failing = set(
        rows.filter(row_states.not_valid(run.pk)).values_list("source_task_id", flat=True)
    )
    assert failing == {tasks["good"][2].pk, tasks["good"][3].pk} | {t.pk for t in tasks["bad"]}
    assert failing.isdisjoint(
        row_states.exportable(run.pk).values_list("source_task_id", flat=True)
    )


def test_shown_state_is_held_in_a_quarantined_partition_and_the_verdict_elsewhere():
    run = make_run()
    tasks = held_run(run)
    held = set(row_states.held_partitions(run.pk).values_list("name", flat=True))
    assert held == {"bad"}
    shown = {
        o.source_task_id: row_states.shown_state(o, held)
        for o in Observation.objects.filter(run=run)
    }
    assert [shown[t.pk] for t in tasks["good"]] == ["valid", "valid", "invalid", "pending"]
    assert [shown[t.pk] for t in tasks["bad"]] == ["held", "held", "held"]
