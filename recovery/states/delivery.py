"""Delivery (outbox events and media handoff): unsent -> sending -> delivered.

sending -> failed (retry later) or sending -> uncertain (the destination may have the write:
look it up by idempotency key before any resend). A crashed sender's expired "sending" lease is
claimable again (sending -> sending).

A media handoff (RemoteJob.handoff_state, `HANDOFF_ALLOWED`) follows its outbox event through
those moves, then: -> finished when the consumer acknowledges it is done (its acknowledgement
proves the delivery, so it may overtake a mirror that lags), -> missing when the provider
answers 404/410 for the stored object, missing -> regenerated when an operator orders a new
(paid) job for it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from recovery.states.base import check_move
from recovery.states.choices import DeliveryState, HandoffState

if TYPE_CHECKING:
    from django.db.models import Model

ALLOWED: dict[str, frozenset[str]] = {
    DeliveryState.UNSENT: frozenset({DeliveryState.SENDING}),
    DeliveryState.SENDING: frozenset(
        {
            DeliveryState.DELIVERED,
            DeliveryState.FAILED,
            DeliveryState.UNCERTAIN,
            DeliveryState.SENDING,
        }
    ),
    DeliveryState.FAILED: frozenset({DeliveryState.SENDING}),
    DeliveryState.UNCERTAIN: frozenset({DeliveryState.SENDING}),
    DeliveryState.DELIVERED: frozenset(),
}


_AFTER_SENDING = frozenset({HandoffState.FINISHED, HandoffState.MISSING})

HANDOFF_ALLOWED: dict[str, frozenset[str]] = {
    **{state: frozenset({*targets, HandoffState.MISSING}) for state, targets in ALLOWED.items()},
    HandoffState.SENDING: ALLOWED[DeliveryState.SENDING] | _AFTER_SENDING,
    HandoffState.FAILED: ALLOWED[DeliveryState.FAILED] | _AFTER_SENDING,
    HandoffState.UNCERTAIN: ALLOWED[DeliveryState.UNCERTAIN] | _AFTER_SENDING,
    HandoffState.DELIVERED: _AFTER_SENDING,
    HandoffState.FINISHED: frozenset({HandoffState.MISSING}),
    HandoffState.MISSING: frozenset({HandoffState.REGENERATED}),
    HandoffState.REGENERATED: frozenset(),
}


def move_handoff(job_pk: int, source: str, target: str, **fields: object) -> bool:
    """Move a RemoteJob's handoff_state from `source` to `target` if it is still there."""
    from recovery.models import RemoteJob

    check_move("media handoff", HANDOFF_ALLOWED, [source], target)
    return bool(
        RemoteJob.objects.filter(pk=job_pk, handoff_state=source).update(
            handoff_state=target, **fields
        )
    )


def move(
    model: type[Model],
    pk: int | uuid.UUID,
    source: str,
    target: str,
    *,
    field: str = "state",
    **fields: object,
) -> bool:
    """Move an OutboxEvent (field "state"); a media handoff moves through `move_handoff`."""
    check_move("delivery", ALLOWED, [source], target)
    # _default_manager: Django's name for a model's manager in code written for any model.
    return bool(
        model._default_manager.filter(pk=pk, **{field: source}).update(**{field: target}, **fields)
    )
