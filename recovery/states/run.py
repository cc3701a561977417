"""Run acceptance: collecting -> candidate -> accepted -> published; candidate -> rejected.

A recovery batch reopens a candidate or rejected run (-> collecting) so that it is judged again
when its tasks are terminal; accepted and published runs stay available while a batch runs
(guarantee 9) and repaired values become corrections.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from recovery.states.base import check_move


class RunState(models.TextChoices):
    COLLECTING = "collecting"
    CANDIDATE = "candidate"
    ACCEPTED = "accepted"
    PUBLISHED = "published"
    REJECTED = "rejected"


ALLOWED: dict[str, frozenset[str]] = {
    RunState.COLLECTING: frozenset({RunState.CANDIDATE}),
    RunState.CANDIDATE: frozenset({RunState.ACCEPTED, RunState.REJECTED, RunState.COLLECTING}),
    RunState.ACCEPTED: frozenset({RunState.PUBLISHED}),
    RunState.PUBLISHED: frozenset(),
    RunState.REJECTED: frozenset({RunState.COLLECTING}),
}

# Runs whose accepted observations may be exported or served as "current".
AVAILABLE = frozenset({RunState.ACCEPTED, RunState.PUBLISHED})

_STAMP = {
    RunState.CANDIDATE: "candidate_at",
    RunState.ACCEPTED: "accepted_at",
    RunState.PUBLISHED: "published_at",
}


def move(run_id: int, source: str, target: str, **fields) -> bool:
    """Move a run from `source` to `target` if it is still there; True if it moved."""
    from recovery.models import Run

    check_move("run", ALLOWED, [source], target)
    if target in _STAMP:
        fields.setdefault(_STAMP[target], timezone.now())
    return bool(
        Run.objects.filter(pk=run_id, acceptance_state=source).update(
            acceptance_state=target, **fields
        )
    )
