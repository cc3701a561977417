"""Corrections: a repaired value of a published observation supersedes it as a new version.

Consumers already received the published value, so a repair must not be a silent overwrite
(seed 002): the old value is kept in ObservationVersion, the observation's `version` goes up by
one, and a `correction` outbox event announces the change, all in the caller's transaction (the
engine's fenced commit), so a rolled-back commit leaves neither the new value nor the event.

The engine's observation upsert calls `supersede()` for an existing observation whose run is
published (`needs_version(run_state)`) instead of updating it in place.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery.models import Observation, ObservationVersion, OutboxEvent
from recovery.states.run import RunState

VERSIONED_STATES = frozenset({RunState.PUBLISHED})


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
    """Replace a published observation's value by a new version; True if it changed.

    Same hash -> nothing happens (a repeated delivery of the same value is not a correction).
    Must run inside the transaction that commits the attempt (atomic() nests as a savepoint).
    """
    from recovery import outbox

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
        }
        if scraper_version is not None:
            fields["scraper_version"] = scraper_version
        # Guarded on the version read above: two concurrent repairs cannot both win.
        changed = Observation.objects.filter(pk=obs.pk, version=obs.version).update(**fields)
        if not changed:
            raise RuntimeError(f"observation {obs.pk} changed meanwhile")
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
