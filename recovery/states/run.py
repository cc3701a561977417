"""Run acceptance: collecting -> candidate -> accepted -> published; candidate -> rejected.

A recovery batch reopens a candidate or rejected run (-> collecting) so that it is judged again
when its tasks are terminal; accepted and published runs stay available while a batch runs
(guarantee 9) and repaired values become corrections.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from recovery.ops import logs
from recovery.states.base import check_move
from recovery.states.choices import RunState

log = logging.getLogger(__name__)

ALLOWED: dict[str, frozenset[str]] = {
    RunState.COLLECTING: frozenset({RunState.CANDIDATE}),
    RunState.CANDIDATE: frozenset({RunState.ACCEPTED, RunState.REJECTED, RunState.COLLECTING}),
    RunState.ACCEPTED: frozenset({RunState.PUBLISHED}),
    RunState.PUBLISHED: frozenset(),
    RunState.REJECTED: frozenset({RunState.COLLECTING}),
}

# Runs whose accepted observations may be exported or served as "current".
AVAILABLE = frozenset({RunState.ACCEPTED, RunState.PUBLISHED})

# The event each move logs (recovery.ops.logs), once, when its transaction commits.
EVENTS: dict[str, str] = {
    RunState.CANDIDATE: "run_candidate",
    RunState.ACCEPTED: "run_accepted",
    RunState.REJECTED: "run_rejected",
    RunState.PUBLISHED: "run_published",
    RunState.COLLECTING: "run_reopened",  # a recovery batch reopened a candidate or rejected run
}

_STAMP: dict[str, str] = {
    RunState.CANDIDATE: "candidate_at",
    RunState.ACCEPTED: "accepted_at",
    RunState.PUBLISHED: "published_at",
}


def move(run_id: int, source: str, target: str, **fields: object) -> bool:
    """Move a run from `source` to `target` if it is still there; True if it moved."""
    from recovery.models import Run

    check_move("run", ALLOWED, [source], target)
    if target in _STAMP:
        fields.setdefault(_STAMP[target], timezone.now())
    moved = bool(
        Run.objects.filter(pk=run_id, acceptance_state=source).update(
            acceptance_state=target, **fields
        )
    )
    if moved:
        dataset = Run.objects.filter(pk=run_id).values_list("dataset__name", flat=True).first()
        # After COMMIT: a move its transaction rolls back did not happen, and logs nothing.
        transaction.on_commit(
            lambda: logs.event(
                log,
                EVENTS[target],
                "run %s (%s): %s -> %s",
                run_id,
                dataset,
                source,
                target,
                run=run_id,
                dataset=dataset,
            )
        )
    return moved
