"""What the run puts out: seed 002's last four properties, checked by doing what an operator
does (accept, repair, deliver, replace) and reading the result.

In: the `Drill` (its sandbox, to repair or fault the source and the destination) and its
collected run. Out: one figure dict per property, `ok` first:
`quarantined_output_not_published`, `repaired_partition_leaves_accepted_unchanged`,
`delivery_repeats_without_collection`, `previous_dataset_available_until_replacement_passes`;
an uncertain destination write is reported as a scenario beside them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from recovery.ops.processes import wait_until
from recovery.showroom.drill.options import ACTOR, DATASET, REPLACEMENT_WINDOW
from recovery.showroom.drill.report import PROPERTIES, missing_module, not_ok
from recovery.showroom.drill.rows import (
    candidate_diagnostics,
    exported_rows,
    held_entity_keys,
    row_keys,
    valid_rows,
)
from recovery.showroom.drill.runner import Drill


def acceptance_properties(
    drill: Drill, run_id: int, props: dict[str, dict[str, Any]], scenarios: dict[str, Any]
) -> None:
    absent = missing_module(
        "recovery.quality.acceptance",
        "recovery.quality.reruns",
        "recovery.delivery.outbox",
        "recovery.delivery.exports",
    )
    if absent:
        for name in PROPERTIES[3:]:
            props[name] = not_ok(absent)
        return
    # Deliveries go to the sandbox's destination simulator (Drill.start_sandbox, Drill.env).
    steps = (
        ("quarantined_output_not_published", quarantine_property),
        ("repaired_partition_leaves_accepted_unchanged", repair_property),
        ("delivery_repeats_without_collection", delivery_property),
        ("previous_dataset_available_until_replacement_passes", replacement_property),
    )
    for name, step in steps:
        try:
            props[name] = step(drill, run_id, scenarios)
        except Exception as exc:  # report the failure as a figure, keep drilling
            props[name] = not_ok(f"{type(exc).__name__}: {exc}"[:500])


def _evaluated(run_id: int) -> bool:
    from recovery.models import AuditEntry

    return AuditEntry.objects.filter(
        action="run_candidate", object_type="run", object_id=str(run_id)
    ).exists()


def quarantine_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """Accept a run whose bad partition is quarantined: its held rows never leave (export);
    after the repair the run is published and the published rows are checked again."""
    from recovery.models import RunPartition
    from recovery.quality import acceptance
    from recovery.sandbox import site

    state = drill.wait_run_state(run_id, ("candidate",))
    # The candidate move and its evaluation commit together; wait (bounded) to be sure.
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: _evaluated(run_id), timeout=60, what="the candidate's evaluation")
    bad = site.bad_retailer_for(drill.options.seed)
    quarantined = sorted(
        RunPartition.objects.filter(run_id=run_id, quarantined=True).values_list("name", flat=True)
    )
    held_keys = held_entity_keys(run_id, bad)
    drill.held_keys = held_keys
    valid = valid_rows(run_id)
    diagnostics = candidate_diagnostics(run_id)
    acceptance.accept_run(run_id, ACTOR)
    rows = exported_rows(run_id)
    leaked = len(row_keys(rows) & held_keys)
    ok = (
        state == "candidate"
        and bad in quarantined
        and len(held_keys) > 0
        and leaked == 0
        and len(rows) == valid
    )
    return {
        "ok": ok,
        "state_before_accept": state,
        "evaluated": _evaluated(run_id),
        "quarantined_partitions": quarantined,
        "held_observations": len(held_keys),
        "accepted_rows_exported": len(rows),
        "valid_observations": valid,
        "held_rows_exported": leaked,
        **({} if ok else {"diagnostics": diagnostics}),
    }


def _collection_snapshot(run_ids: list[int]) -> dict[str, Any]:
    from django.db.models import Count, Max

    from recovery.models import Attempt, Task

    return {
        "attempts": Attempt.objects.filter(run_id__in=run_ids).count(),
        "tasks": Task.objects.filter(run_id__in=run_ids).count(),
        "last_attempt": str(
            Attempt.objects.filter(run_id__in=run_ids).aggregate(m=Max("started_at"))["m"]
        ),
        "states": dict(
            Task.objects.filter(run_id__in=run_ids)
            .values_list("state")
            .annotate(n=Count("pk"))
            .order_by()
        ),
    }


def delivery_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """The destination times out after storing the write; the outbox looks the event up
    before writing again, and delivering (again) never collects anything."""
    from datetime import timedelta

    from django.utils import timezone

    from recovery.delivery import outbox
    from recovery.models import OutboxEvent, Run

    events = list(OutboxEvent.objects.filter(run_id=run_id).order_by("created_at"))
    if not events:
        return not_ok("accepting the run wrote no outbox event")
    before = _collection_snapshot(list(Run.objects.values_list("pk", flat=True)))
    # The next write is stored, then answered too late: an uncertain write.
    drill.sandbox_post("/destination/_faults", {"slow_after_write": 1})
    first = outbox.deliver_one(events[0].pk)
    later = timezone.now() + timedelta(hours=1)  # past any backoff
    states = [first]
    for _ in range(3):
        states.append(outbox.deliver_one(events[0].pk, now=later))
        if states[-1] == "delivered":
            break
    for event in events[1:]:
        outbox.deliver_one(event.pk, now=later)
    stats = drill.sandbox_get("/destination/_stats")
    puts = stats.get("puts", {})
    delivered = OutboxEvent.objects.filter(run_id=run_id, state="delivered").count()
    after = _collection_snapshot(list(Run.objects.values_list("pk", flat=True)))
    scenarios["uncertain_destination_write"] = {
        "ok": first == "uncertain" and states[-1] == "delivered",
        "states": states,
        "writes_of_event": puts.get(str(events[0].pk), 0),
        "lookups_of_event": stats.get("lookups", {}).get(str(events[0].pk), 0),
    }
    return {
        "ok": first == "uncertain"
        and delivered == len(events)
        and all(puts.get(str(e.pk), 0) == 1 for e in events)
        and before == after,
        "events": len(events),
        "delivered": delivered,
        "delivery_states": states,
        "writes_per_event": sorted({puts.get(str(e.pk), 0) for e in events}),
        "attempts_before": before["attempts"],
        "attempts_after": after["attempts"],
        "collection_unchanged": before == after,
    }


def repair_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """Repair the source, rerun the quarantined partition under the original run: the other
    partitions' observations hash exactly as before; the repaired one becomes valid."""
    from recovery.models import Observation, RecoveryBatch, Task
    from recovery.quality import acceptance, reruns
    from recovery.sandbox import site

    bad = site.bad_retailer_for(drill.options.seed)
    drill.sandbox_post("/_sandbox/faults", {"bad_retailer": False})
    batch = reruns.create_recovery_batch(
        run_id,
        partitions=[bad],
        reason="drill: the retailer's price feed was repaired",
        scraper_version="2",
        actor=ACTOR,
    )
    finished = drill.wait_terminal(run_id, Task.objects.filter(run_id=run_id).count())
    # The workers complete the batch (their advance step); the drill only watches, so it
    # adds no evaluation of its own to theirs.
    with contextlib.suppress(TimeoutError):
        wait_until(
            lambda: RecoveryBatch.objects.filter(
                pk=batch.pk, state=RecoveryBatch.State.COMPLETED
            ).exists(),
            timeout=min(drill.options.timeout, 120),
            what="the recovery batch completing",
        )
    batch.refresh_from_db()
    unchanged = reruns.untouched_unchanged(batch)
    repaired_valid = valid_rows(run_id, bad)
    repaired_total = Observation.objects.filter(run_id=run_id, partition=bad).count()
    repaired_keys = set(
        Observation.objects.filter(run_id=run_id, partition=bad).values_list(
            "entity_key", flat=True
        )
    )
    # Seed 002's last step: promote (publish) only after the repair revalidated. Every
    # partition is good now, so the published dataset must be every observation of the run.
    acceptance.publish_run(run_id, ACTOR)
    published = exported_rows(run_id)
    everything = Observation.objects.filter(run_id=run_id).count()
    repaired_published = len(row_keys(published) & repaired_keys)
    return {
        "ok": bool(unchanged)
        and all(unchanged.values())
        and batch.state == RecoveryBatch.State.COMPLETED
        and finished
        and repaired_total > 0
        and repaired_valid == repaired_total
        and len(published) == everything
        and repaired_published == len(repaired_keys),
        "published_rows": len(published),
        "run_observations": everything,
        "repaired_rows_published": repaired_published,
        **(
            {}
            if repaired_valid == repaired_total and len(published) == everything
            else {"diagnostics": candidate_diagnostics(run_id)}
        ),
        "batch": batch.pk,
        "batch_tasks": batch.task_count,
        "batch_state": batch.state,
        "untouched_partitions": len(unchanged),
        "untouched_unchanged": sum(unchanged.values()),
        "repaired_observations_valid": repaired_valid,
        "repaired_observations": repaired_total,
    }


def replacement_property(drill: Drill, run_id: int, scenarios: dict) -> dict[str, Any]:
    """A replacement run that fails its rules never displaces the accepted dataset; one that
    passes does, only once accepted."""
    from recovery.delivery import exports
    from recovery.quality import acceptance
    from recovery.sandbox import site

    seed, pages = drill.options.seed, drill.options.tasks
    bad = site.bad_retailer_for(seed)
    current_before = getattr(exports.current_run(DATASET), "pk", None)
    rows_before = len(exported_rows(run_id))
    checks: dict[str, Any] = {"current_before": current_before, "rows_before": rows_before}

    # A replacement of only the bad retailer's products, with the fault back: it must fail.
    drill.sandbox_post("/_sandbox/faults", {"bad_retailer": True})
    failing = [i for i in range(1, pages + 1) if site.retailer_for(i, seed=seed) == bad][:150]
    run2 = drill.load(REPLACEMENT_WINDOW, failing)
    checks["current_while_collecting"] = getattr(exports.current_run(DATASET), "pk", None)
    checks["replacement_state"] = drill.wait_run_state(run2, ("candidate",))
    try:
        acceptance.accept_run(run2, ACTOR)
        checks["replacement_accept"] = "accepted"
    except acceptance.AcceptanceError as exc:
        checks["replacement_accept"] = f"refused: {exc}"[:200]
        acceptance.reject_run(run2, ACTOR, "drill: fails its rules")
    checks["current_after_failed_replacement"] = getattr(exports.current_run(DATASET), "pk", None)
    checks["rows_still_exported"] = len(exported_rows(checks["current_after_failed_replacement"]))

    # A good replacement: current only once it is accepted.
    drill.sandbox_post("/_sandbox/faults", {"bad_retailer": False})
    good = [i for i in range(1, pages + 1) if site.retailer_for(i, seed=seed) != bad][:100]
    run3 = drill.load("drill-3", good)
    checks["good_replacement_state"] = drill.wait_run_state(run3, ("candidate",))
    checks["current_while_good_is_candidate"] = getattr(exports.current_run(DATASET), "pk", None)
    acceptance.accept_run(run3, ACTOR)
    checks["current_after_good_accepted"] = getattr(exports.current_run(DATASET), "pk", None)
    ok = (
        current_before == run_id
        and checks["current_while_collecting"] == run_id
        and checks["replacement_accept"] != "accepted"
        and checks["current_after_failed_replacement"] == run_id
        and checks["rows_still_exported"] == rows_before
        and checks["current_while_good_is_candidate"] == run_id
        and checks["current_after_good_accepted"] == run3
    )
    if not ok:
        checks["diagnostics"] = candidate_diagnostics(run_id)
    return {"ok": ok, "accepted_run": run_id, "failing_replacement": run2, **checks}
