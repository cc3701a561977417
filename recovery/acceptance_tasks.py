"""django-q2 entry points for acceptance and outbox delivery (call one engine function each)."""

from __future__ import annotations

from recovery import acceptance, outbox


def advance_runs() -> str:
    """Complete finished recovery batches, make candidates, auto-accept."""
    return f"acceptance: {acceptance.advance_runs()} runs or batches moved"


def deliver_due(limit: int = 50) -> str:
    """Deliver due outbox events (a wake-up; the events table is the truth)."""
    return f"outbox: {outbox.deliver_due(limit)} attempted"


def deliver_event(event_id: str) -> str:
    return f"outbox {event_id}: {outbox.deliver_one(event_id) or 'not due'}"
