"""Delivery (outbox events and media handoff): unsent -> sending -> delivered.

sending -> failed (retry later) or sending -> uncertain (the destination may have the write:
look it up by idempotency key before any resend). A crashed sender's expired "sending" lease is
claimable again (sending -> sending).
"""

from __future__ import annotations

from django.db import models

from recovery.states.base import check_move


class DeliveryState(models.TextChoices):
    UNSENT = "unsent"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


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


def move(model, pk, source: str, target: str, *, field: str = "state", **fields) -> bool:
    """Move an OutboxEvent (field "state") or a RemoteJob handoff (field "handoff_state")."""
    check_move("delivery", ALLOWED, [source], target)
    return bool(model.objects.filter(pk=pk, **{field: source}).update(**{field: target}, **fields))
