"""Remote jobs (seed 001's table, seed 003's plan).

created (attempt saved, nothing sent) -> submitted (job id saved) -> pending ->
completed | failed | revoked. A send whose outcome is unknown -> unknown (reconcile: never
resubmitted automatically). A 404 on lookup -> lookup_failed (operator-visible, polling stops).
Operators resolve unknown/lookup_failed: attach the job id (-> submitted), confirm nothing was
created (-> replaced, with a linked replacement attempt), or dismiss with a reason.
A later "Continue" of a completed cloud job resumes polling (completed -> pending).
"""

from __future__ import annotations

from django.utils import timezone

from recovery.states.base import check_move
from recovery.states.choices import RemoteJobState

_POLL_RESULTS = frozenset(
    {
        RemoteJobState.PENDING,
        RemoteJobState.COMPLETED,
        RemoteJobState.FAILED,
        RemoteJobState.REVOKED,
        RemoteJobState.LOOKUP_FAILED,
    }
)
_OPERATOR_RESOLUTIONS = frozenset(
    {RemoteJobState.SUBMITTED, RemoteJobState.REPLACED, RemoteJobState.DISMISSED}
)

ALLOWED: dict[str, frozenset[str]] = {
    RemoteJobState.CREATED: frozenset(
        {RemoteJobState.SUBMITTED, RemoteJobState.UNKNOWN, RemoteJobState.FAILED}
    ),
    RemoteJobState.SUBMITTED: _POLL_RESULTS,
    RemoteJobState.PENDING: _POLL_RESULTS,
    RemoteJobState.COMPLETED: frozenset({RemoteJobState.PENDING}),
    RemoteJobState.FAILED: frozenset(),
    RemoteJobState.REVOKED: frozenset(),
    RemoteJobState.UNKNOWN: _OPERATOR_RESOLUTIONS,
    RemoteJobState.LOOKUP_FAILED: _OPERATOR_RESOLUTIONS,
    RemoteJobState.REPLACED: frozenset(),
    RemoteJobState.DISMISSED: frozenset(),
}

POLLABLE = frozenset({RemoteJobState.SUBMITTED, RemoteJobState.PENDING})
RECONCILE = frozenset({RemoteJobState.UNKNOWN, RemoteJobState.LOOKUP_FAILED})
TERMINAL = frozenset(
    {
        RemoteJobState.COMPLETED,
        RemoteJobState.FAILED,
        RemoteJobState.REVOKED,
        RemoteJobState.REPLACED,
        RemoteJobState.DISMISSED,
    }
)


def move(job_id: int, source: str, target: str, **fields: object) -> bool:
    """Move a RemoteJob from `source` to `target` if it is still there; True if it moved."""
    from recovery.models import RemoteJob

    check_move("remote job", ALLOWED, [source], target)
    return bool(
        RemoteJob.objects.filter(pk=job_id, state=source).update(
            state=target, updated_at=timezone.now(), **fields
        )
    )


def attach_job_id(
    job_id: int, provider_job_id: str, source: str = RemoteJobState.CREATED, **fields: object
) -> bool:
    """Save the provider's job id; a different id for the same attempt is rejected.

    The guard `provider_job_id IS NULL OR = new` is the seed-003 rule: a known remote job id is
    never replaced by another one (guarantee 10).
    """
    from django.db.models import Q

    from recovery.models import RemoteJob

    if not provider_job_id:
        raise ValueError("a non-empty provider job id is required")
    check_move("remote job", ALLOWED, [source], RemoteJobState.SUBMITTED)
    changed = RemoteJob.objects.filter(
        Q(provider_job_id__isnull=True) | Q(provider_job_id=provider_job_id),
        pk=job_id,
        state=source,
    ).update(
        provider_job_id=provider_job_id,
        state=RemoteJobState.SUBMITTED,
        submitted_at=timezone.now(),
        updated_at=timezone.now(),
        **fields,
    )
    if not changed:
        raise ValueError(
            f"remote job {job_id}: not in {source} or already has a different provider job id"
        )
    return True
