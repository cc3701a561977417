"""DESIGN.md section 3, guarantees 6-9, and seed 002's worked example at reduced scale.

6. Quarantined output can never be exported or published.
7. A repaired partition leaves accepted partitions unchanged.
8. Delivery can repeat without triggering another collection.
9. The previous accepted dataset stays available until its replacement passes.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from recovery import leases
from recovery.delivery import exports, outbox
from recovery.models import (
    Attempt,
    Observation,
    OutboxEvent,
    RecoveryBatch,
    Run,
    RunPartition,
    Task,
    TaskCountDelta,
)
from recovery.quality import acceptance, reruns
from recovery.states.choices import RunState
from tests.support.acceptance import (
    commit_claimed,
    commit_task,
    good_payload,
    lenient_shop,
    make_collected_run,
    make_shop,
)
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def export_rows(run_id: int) -> list[dict]:
    return list(csv.DictReader(io.StringIO("".join(exports.stream(run_id, "csv")))))


# --- guarantee 6 -------------------------------------------------------------------------------


def test_g6_quarantined_output_is_never_exported_or_published(settings, tmp_path):
    settings.SALVAGE_DESTINATION = f"file://{tmp_path}"
    settings.SALVAGE_OUTBOX_WAKE = False
    run = make_collected_run(
        {"a": "good", "b": "good", "c": "bad"}, per_partition=30, dataset=lenient_shop()
    )
    # One observation of a good partition fails a value rule (within the partition rule's
    # tolerance): it is left out on its own.
    odd = Observation.objects.filter(run=run, partition="a").first()
    Observation.objects.filter(pk=odd.pk).update(payload={**odd.payload, "price": "0"})
    acceptance.advance_runs()
    assert RunPartition.objects.get(run=run, name="c").quarantined
    assert Observation.objects.get(pk=odd.pk).validation_state == "invalid"
    with pytest.raises(exports.ExportError, match="candidate"):
        exports.stream(run.pk, "csv")  # a candidate is never exported

    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    rows = export_rows(run.pk)
    assert len(rows) == 59
    assert {r["partition"] for r in rows} == {"a", "b"}
    assert odd.observation_key not in {r["observation_key"] for r in rows}
    jsonl = [json.loads(line) for line in "".join(exports.stream(run.pk, "jsonl")).splitlines()]
    assert {r["partition"] for r in jsonl} == {"a", "b"}
    published = OutboxEvent.objects.get(run=run, event_type="published")
    assert published.payload["observations"] == 59 and published.payload["held"] == 30
    outbox.deliver_due()
    delivered = json.loads((tmp_path / f"{published.pk}.json").read_text())
    assert delivered["payload"]["observations"] == 59

    # An operator's quarantine after acceptance takes effect at once, whatever the row states.
    RunPartition.objects.filter(run=run, name="b").update(quarantined=True)
    assert {r["partition"] for r in export_rows(run.pk)} == {"a"}


# --- guarantee 7 -------------------------------------------------------------------------------


def snapshot(run: Run, partitions: set[str]) -> dict:
    obs = Observation.objects.filter(run=run, partition__in=partitions).order_by("pk")
    tasks = Task.objects.filter(run=run, partition__in=partitions).order_by("pk")
    return {
        "observations": list(
            obs.values_list(
                "observation_key",
                "payload",
                "payload_hash",
                "version",
                "validation_state",
                "source_attempt_id",
                "updated_at",
            )
        ),
        "tasks": list(tasks.values_list("pk", "state", "attempt_count", "lease_token")),
        "attempts": Attempt.objects.filter(task__in=tasks).count(),
    }


def test_g7_a_repaired_partition_leaves_accepted_partitions_unchanged():
    run = make_collected_run({"a": "good", "b": "good", "c": "bad"})
    acceptance.advance_runs()
    acceptance.reject_run(run.pk, "admin", "retailer c has zero prices")
    before = snapshot(run, {"a", "b"})
    batch = reruns.create_recovery_batch(
        run.pk, partitions=["c"], reason="price selector fixed", scraper_version="2", actor="a"
    )
    for task in Task.objects.filter(recovery_batch=batch):
        commit_task(task, good_payload(task))
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    assert snapshot(run, {"a", "b"}) == before
    assert reruns.untouched_unchanged(batch) == {"a": True, "b": True}
    assert len(export_rows(run.pk)) == 30


# --- guarantee 8 -------------------------------------------------------------------------------


def collection_state(run: Run) -> dict:
    return {
        "tasks": list(
            Task.objects.filter(run=run)
            .order_by("pk")
            .values_list("state", "attempt_count", "lease_token", "next_attempt_at")
        ),
        "attempts": Attempt.objects.filter(run=run).count(),
        "deltas": TaskCountDelta.objects.filter(run=run).count(),
        "batches": RecoveryBatch.objects.filter(run=run).count(),
        "observations": list(
            Observation.objects.filter(run=run)
            .order_by("pk")
            .values_list("payload_hash", "version")
        ),
    }


def test_g8_repeated_delivery_triggers_no_collection(settings, tmp_path):
    settings.SALVAGE_DESTINATION = f"file://{tmp_path}"
    settings.SALVAGE_OUTBOX_WAKE = False
    settings.SALVAGE_DELIVERY_LEASE_SECONDS = 1
    run = make_collected_run({"a": "good"}, per_partition=5)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    before = collection_state(run)
    event = OutboxEvent.objects.get(run=run, event_type="accepted")
    # The same event goes out again and again: a crashed sender's expired lease, a retry, the
    # command-line sweep, an operator's lookup.
    assert outbox._claim(event.pk, "unsent", 0, timezone.now())
    for minutes in (1, 2, 3):
        outbox.deliver_due(now=timezone.now() + timedelta(minutes=minutes))
    call_command("deliver", "--until-idle", stdout=io.StringIO())
    outbox.lookup_delivery(event.pk, "ops")
    assert set(OutboxEvent.objects.filter(run=run).values_list("state", flat=True)) == {"delivered"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{pk}.json" for pk in OutboxEvent.objects.filter(run=run).values_list("pk", flat=True)
    )
    assert collection_state(run) == before
    assert leases.claim("w-after-delivery") == []  # nothing became due


# --- guarantee 9 -------------------------------------------------------------------------------


def test_g9_previous_accepted_dataset_stays_current_until_the_replacement_passes():
    dataset = make_shop()
    first = make_collected_run({"a": "good", "b": "good"}, dataset=dataset)
    acceptance.advance_runs()
    acceptance.accept_run(first.pk, "admin")
    first_export = "".join(exports.stream(first.pk, "csv"))
    assert exports.current_run(dataset.name) == first

    second = make_run(dataset)
    tasks = make_tasks(second, 10, partition="a", host="a.test")
    assert exports.current_run(dataset.name) == first  # collecting
    bad = make_tasks(second, 10, partition="b", host="b.test")
    for task in tasks:
        commit_task(task, good_payload(task))
    for task in bad:
        commit_task(task, {**good_payload(task), "price": "-1"})
    acceptance.advance_runs()
    second.refresh_from_db()
    assert second.acceptance_state == RunState.CANDIDATE
    with pytest.raises(acceptance.AcceptanceError):
        acceptance.accept_run(second.pk, "admin")
    assert exports.current_run(dataset.name) == first  # failing candidate
    acceptance.reject_run(second.pk, "admin", "negative prices")
    assert exports.current_run(dataset.name) == first  # rejected
    batch = reruns.create_recovery_batch(
        second.pk, partitions=["b"], reason="fixed", scraper_version="2", actor="admin"
    )
    assert exports.current_run(dataset.name) == first  # being repaired
    for task in Task.objects.filter(recovery_batch=batch):
        commit_task(task, good_payload(task))
    acceptance.advance_runs()
    assert exports.current_run(dataset.name) == first  # candidate again, not yet accepted
    assert "".join(exports.stream(first.pk, "csv")) == first_export
    acceptance.accept_run(second.pk, "admin")
    assert exports.current_run(dataset.name) == second


# --- seed 002's worked example, on the engine's own claim and fenced commit --------------------


def test_seed_002_worked_example_quarantine_repair_revalidate_promote():
    dataset = make_shop()
    run = make_run(dataset, manifest_sha256="f" * 64)
    for retailer in ("alpha", "beta", "gamma"):
        make_tasks(run, 20, partition=retailer, host=f"{retailer}.test")

    def scraped(c):  # gamma's price selector matched the "was" price placeholder: "0.00"
        price = "0.00" if c.partition == "gamma" else f"{10 + c.task_id % 9}.99"
        return {"title": f"Item {c.task_id}", "price": price, "sku": f"SKU-{c.task_id}"}

    assert len(commit_claimed("w1", scraped)) == 60
    acceptance.advance_runs()
    run.refresh_from_db()
    assert run.acceptance_state == RunState.CANDIDATE
    gamma = RunPartition.objects.get(run=run, name="gamma")
    assert gamma.quarantined and "partition_invalid_prices" in gamma.quarantine_reason
    with pytest.raises(acceptance.AcceptanceError, match="coverage"):
        acceptance.accept_run(run.pk, "admin")
    call_command("reject", str(run.pk), "--reason", "gamma prices invalid", stdout=io.StringIO())

    keys_before = set(Observation.objects.filter(run=run).values_list("observation_key", flat=True))
    hashes_before = reruns.partition_hashes(run.pk, ["alpha", "beta"])
    call_command(
        "rerun",
        str(run.pk),
        "--rule",
        "partition_invalid_prices",
        "--reason",
        "price selector repaired",
        "--scraper-version",
        "2",
        stdout=io.StringIO(),
    )
    batch = RecoveryBatch.objects.get(run=run)
    assert batch.manifest_sha256 == "f" * 64 and batch.task_count == 20
    assert batch.partition_hashes_before == hashes_before

    def repaired(c):
        return {"title": f"Item {c.task_id}", "price": "12.49", "sku": f"SKU-{c.task_id}"}

    claimed = commit_claimed("w2", repaired)
    assert {c.partition for c in claimed} == {"gamma"} and len(claimed) == 20
    assert {c.recovery_batch_id for c in claimed} == {batch.pk}
    batch_attempts = Attempt.objects.filter(task__partition="gamma", run=run)
    assert batch_attempts.count() == 40  # one original and one batch attempt per task
    assert batch_attempts.filter(recovery_batch=batch).count() == 20

    acceptance.advance_runs()
    batch.refresh_from_db()
    assert batch.state == "completed"
    assert not RunPartition.objects.get(run=run, name="gamma").quarantined
    call_command("accept", str(run.pk), stdout=io.StringIO())
    run.refresh_from_db()
    assert run.acceptance_state == RunState.ACCEPTED
    # Same observation identities, no duplicates; the untouched retailers hash as before.
    assert (
        set(Observation.objects.filter(run=run).values_list("observation_key", flat=True))
        == keys_before
    )
    assert reruns.partition_hashes(run.pk, ["alpha", "beta"]) == hashes_before
    rows = export_rows(run.pk)
    assert len(rows) == 60
    assert {r["price"] for r in rows if r["partition"] == "gamma"} == {"12.49"}
    # Provenance: the repaired rows name the repaired scraper version, the others the original.
    assert {r["scraper_version"] for r in rows if r["partition"] == "gamma"} == {"2"}
    assert {r["scraper_version"] for r in rows if r["partition"] != "gamma"} == {"1"}
    assert set(
        batch_attempts.filter(recovery_batch=batch).values_list("scraper_version", flat=True)
    ) == {"2"}
