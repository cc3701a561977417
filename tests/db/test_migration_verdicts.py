"""Migration 0025: rows an earlier evaluation stored as `held` go back to `pending` (held now
lives on the partition), and the next evaluation judges them and shows them held again."""

from __future__ import annotations

import pytest

from recovery.models import Observation
from recovery.quality import validation
from recovery.states import row_states
from tests.support.acceptance import SHOP_SPEC
from tests.support.migrations import migrate, migrate_to_latest, old_database_at

BEFORE = [("recovery", "0024_partial_error_index_no_delta_run_index")]
AFTER = [("recovery", "0025_observation_verdict")]

pytestmark = pytest.mark.django_db(transaction=True)


old_database = old_database_at(BEFORE)


def test_stored_holds_become_pending_and_are_judged_again(old_database):
    apps = old_database
    Dataset = apps.get_model("recovery", "Dataset")
    Run = apps.get_model("recovery", "Run")
    Task = apps.get_model("recovery", "Task")
    OldObservation = apps.get_model("recovery", "Observation")
    RunPartition = apps.get_model("recovery", "RunPartition")

    dataset = Dataset.objects.create(
        name="shop", spec=SHOP_SPEC, spec_sha256="0" * 64, provider="noop"
    )
    run = Run.objects.create(dataset=dataset, window="2026-11-30")
    RunPartition.objects.create(run=run, name="b", quarantined=True, quarantine_reason="manual")
    rows = [("a", "valid", "SKU-1"), ("a", "invalid", "nope"), ("b", "held", "SKU-3")]
    for i, (partition, state, sku) in enumerate(rows):
        task = Task.objects.create(
            run=run, task_key=f"{i}".ljust(64, "0"), url=f"http://{partition}.test/{i}",
            partition=partition, state="committed",
        )  # fmt: skip
        OldObservation.objects.create(
            run=run, observation_key=f"o{i}".ljust(64, "0"), entity_key=f"e{i}",
            window=run.window, partition=partition, source_task=task, payload_hash="x",
            payload={"title": "t", "sku": sku, "price": "12.50"}, validation_state=state,
        )  # fmt: skip

    migrate(AFTER)
    stored = dict(Observation.objects.filter(run_id=run.pk).values_list("partition", "verdict"))
    assert stored == {"a": None, "b": None}  # no verdict known yet
    assert sorted(
        Observation.objects.filter(run_id=run.pk).values_list("partition", "validation_state")
    ) == [("a", "invalid"), ("a", "valid"), ("b", "pending")]

    migrate_to_latest()
    outcome = validation.evaluate(run.pk)
    assert (
        outcome.counts
        == row_states.state_counts(run.pk)
        == {
            "valid": 1,
            "invalid": 1,
            "held": 1,
        }
    )
    assert not Observation.objects.filter(run_id=run.pk, validation_state="pending").exists()
