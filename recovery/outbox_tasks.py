"""django-q2 entry points for outbox delivery (take ids, call one engine function)."""

from __future__ import annotations

from recovery import outbox


def deliver_due(limit: int = 50) -> str:
    """Deliver due outbox events (a wake-up; the events table is the truth)."""
    return f"outbox: {outbox.deliver_due(limit)} attempted"


def deliver_event(event_id: str) -> str:
    return f"outbox {event_id}: {outbox.deliver_one(event_id) or 'not due'}"
