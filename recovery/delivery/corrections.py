"""Corrections: a repaired value of an accepted or published observation becomes a new version.

Consumers may already have the value (a published run was announced; an accepted run can be
exported and was announced as accepted), so a repair must not be a silent overwrite (seed 002);
and the run must stay available meanwhile (guarantee 9), so the row is not sent back to
"pending" and out of the export while its batch runs. The old value is kept in
ObservationVersion, the observation's `version` goes up by one, and a `correction` outbox event
announces the change, all in the caller's transaction (the engine's fenced commit), so a
rolled-back commit leaves neither the new value nor the event.

The engine's fenced commit (recovery.leases) passes its observation rows through
`divert_published()` before its upsert: rows of accepted or published runs whose value changed
become corrections here, the rest go on to the plain upsert (a candidate's or rejected run's
repaired rows simply replace the values nobody received, as seed 002 allows).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery.models import Observation, ObservationVersion, OutboxEvent, Run
from recovery.states.choices import RunState

VERSIONED_STATES = frozenset({RunState.ACCEPTED, RunState.PUBLISHED})


def needs_version(run_state: str) -> bool:
    """True when a changed value of a run in this state must become a correction."""
    return run_state in VERSIONED_STATES


def supersede(
    observation_id: int,
    new_payload: dict[str, Any],
    new_hash: str,
    attempt_id: Any = None,
    *,
    reason: str = "",
    scraper_version: str | None = None,
) -> bool:
    """Replace an accepted/published observation's value by a new version; True if changed.

    Same hash -> nothing happens (a repeated delivery of the same value is not a correction).
    Must run inside the transaction that commits the attempt (atomic() nests as a savepoint).
    """
    from recovery.delivery import latest, outbox

    with transaction.atomic():
        obs = (
            Observation.objects.select_for_update()
            .select_related("run")
            .filter(pk=observation_id)
            .first()
        )
        if obs is None:
            raise ValueError(f"observation {observation_id} does not exist")
        if obs.payload_hash == new_hash:
            return False
        ObservationVersion.objects.create(
            observation=obs,
            version=obs.version,
            payload=obs.payload,
            payload_hash=obs.payload_hash,
            source_attempt_id=obs.source_attempt_id,
            reason=reason,
        )
        fields: dict[str, Any] = {
            "payload": new_payload,
            "payload_hash": new_hash,
            "version": obs.version + 1,
            "source_attempt_id": attempt_id,
            "updated_at": timezone.now(),
            # The stored verdict judged the old value; a later evaluation judges the new one.
            "verdict": None,
            "verdict_rules": "",
        }
        if scraper_version is not None:
            fields["scraper_version"] = scraper_version
        # Guarded on the version read above: two concurrent repairs cannot both win.
        changed = Observation.objects.filter(pk=obs.pk, version=obs.version).update(**fields)
        if not changed:
            raise RuntimeError(f"observation {obs.pk} changed meanwhile")
        # The entity's current-state row, when it holds this value (a published run's).
        latest.corrected(obs, new_payload, new_hash, obs.version + 1, scraper_version)
        outbox.enqueue(
            obs.run,
            OutboxEvent.Kind.CORRECTION,
            {
                "observation_key": obs.observation_key,
                "entity_key": obs.entity_key,
                "window": obs.window,
                "previous_version": obs.version,
                "version": obs.version + 1,
                "previous_payload_hash": obs.payload_hash,
                "payload_hash": new_hash,
                "payload": new_payload,
                "reason": reason,
            },
        )
    return True


@dataclass(frozen=True, slots=True)
class ObservationRow:
    """One observation the engine's commit is about to write (recovery.leases)."""

    observation_key: str
    entity_key: str
    payload_json: str  # canonical JSON: payload_hash is computed over this spelling
    payload_hash: str
    # The commit's plan for the task that observed it: `claimed` (run, window, partition,
    # task, recovery batch, scraper version) and `attempt_id`.
    plan: Any
    # Its verdict under the run's rules (quality.verdicts): bits, state and the rules' digest;
    # None / "pending" / "" when the commit could not judge it.
    verdict: int | None = None
    state: str = "pending"
    rules_digest: str = ""


def divert_published(rows: Sequence[ObservationRow]) -> list[ObservationRow]:
    """Filter the engine's observation rows.

    An existing observation of an accepted or published run gets a new version via
    `supersede()` (same value: nothing to do); every other row is returned for the engine's
    upsert. Runs inside the commit transaction, so the correction commits or rolls back with
    the attempt.
    """
    if not rows:
        return list(rows)
    run_ids = {row.plan.claimed.run_id for row in rows}
    published = set(
        Run.objects.filter(pk__in=run_ids, acceptance_state__in=VERSIONED_STATES).values_list(
            "pk", flat=True
        )
    )
    if not published:
        return list(rows)
    candidates = [row for row in rows if row.plan.claimed.run_id in published]
    existing = dict(
        Observation.objects.filter(
            observation_key__in=[row.observation_key for row in candidates]
        ).values_list("observation_key", "pk")
    )
    kept = []
    for row in rows:
        plan = row.plan
        if plan.claimed.run_id not in published or row.observation_key not in existing:
            kept.append(row)
            continue
        batch = plan.claimed.recovery_batch_id
        supersede(
            existing[row.observation_key],
            json.loads(row.payload_json),
            row.payload_hash,
            plan.attempt_id,
            reason=f"recovery batch {batch}" if batch else "re-collected",
            scraper_version=plan.claimed.scraper_version,
        )
    return kept
