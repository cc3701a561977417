"""The audit log: who did what, when and why. Written in the same transaction as the action."""

from __future__ import annotations

from typing import Any

from recovery.models import AuditEntry


def record(actor: str, action: str, obj: Any, reason: str = "", **detail: Any) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor or "system",
        action=action,
        object_type=type(obj).__name__.lower() if obj is not None else "",
        object_id=str(getattr(obj, "pk", "") or ""),
        reason=reason,
        detail=detail,
    )
