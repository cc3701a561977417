"""Poll due jobs: claimed many at once with a fenced lease on the job row, polled
concurrently, each answer committed under that lease (SUCCESS goes to importing)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from recovery.failures import backoff
from recovery.ops import logs
from recovery.outcomes import ErrorClass
from recovery.providers.remote_base import (
    JobStatus,
    Poll,
    RemoteProvider,
)
from recovery.remote.importing import import_results
from recovery.remote.jobs import (
    fault,
    guarded,
    keep_incident,
    lease_seconds,
    poll_failure_budget,
    provider_for,
    settle_tasks,
)
from recovery.states import task as task_states
from recovery.states.base import check_move
from recovery.states.choices import RemoteJobState, TaskState
from recovery.states.remote_job import ALLOWED, POLLABLE

if TYPE_CHECKING:
    from recovery.models import RemoteJob

log = logging.getLogger(__name__)


def claim_due_polls(worker_id: str, limit: int = 50) -> list[tuple[int, int]]:
    """Lease due jobs for one poll each: (pk, lease_token). Two workers never poll one job."""
    from recovery.models import RemoteJob

    now = timezone.now()
    due = RemoteJob.objects.filter(state__in=list(POLLABLE), next_poll_at__lte=now).filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    )
    # A plain read first: the worker loop calls this every iteration, and on SQLite a write
    # transaction takes the database's only write lock even when nothing is due.
    if not due.exists():
        return []
    with transaction.atomic():
        pks = list(
            RemoteJob.objects.select_for_update(skip_locked=True)
            .filter(state__in=list(POLLABLE), next_poll_at__lte=now)
            .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
            .order_by("next_poll_at")
            .values_list("pk", flat=True)[:limit]
        )
        if not pks:
            return []
        RemoteJob.objects.filter(pk__in=pks).filter(
            Q(lease_until__isnull=True) | Q(lease_until__lt=now)
        ).update(
            lease_owner=worker_id,
            lease_token=F("lease_token") + 1,
            lease_until=now + timedelta(seconds=lease_seconds()),
            last_polled_at=now,
        )
        return list(
            RemoteJob.objects.filter(pk__in=pks, lease_owner=worker_id).values_list(
                "pk", "lease_token"
            )
        )


def poll_step(worker_id: str, limit: int = 50) -> bool:
    """Poll every due job (many at once), then commit each answer under its lease."""
    from recovery.models import RemoteJob

    claimed = dict(claim_due_polls(worker_id, limit))
    if not claimed:
        return False
    jobs = list(RemoteJob.objects.select_related("run__dataset").filter(pk__in=list(claimed)))
    providers = {job.pk: provider_for(job.run.dataset) for job in jobs}

    async def poll_all() -> list[JobStatus]:
        async def one(job: RemoteJob) -> JobStatus:
            if job.provider_job_id is None:  # attach_job_id saves it before any poll is due
                return JobStatus(Poll.NOT_FOUND, detail="no provider job id to look up")
            try:
                return await providers[job.pk].status(job.provider_job_id)
            except Exception as exc:  # an adapter bug or a malformed answer: check again later
                return JobStatus(Poll.RETRY, detail=f"{type(exc).__name__}: {exc}")

        try:
            return await asyncio.gather(*(one(job) for job in jobs))
        finally:
            for provider in providers.values():
                await provider.aclose()

    results = asyncio.run(poll_all())
    for job, status in zip(jobs, results, strict=True):
        fault("after_poll_before_commit")
        try:
            record_poll(job, claimed[job.pk], status, providers[job.pk])
        except Exception:
            log.exception(
                "remote job %s: recording the poll failed; it will be polled again", job.pk
            )
    return True


def record_poll(job: RemoteJob, token: int, status: JobStatus, provider: RemoteProvider) -> bool:
    """Commit one poll's answer, fenced by the job's lease token. False if we lost the lease."""
    now = timezone.now()
    fence = {"lease_token": token}
    release: dict[str, object] = {"lease_owner": "", "lease_until": None, "last_polled_at": now}
    detail = logs.redact(status.detail)
    outcome = status.outcome
    if outcome == Poll.SUCCESS:
        return import_results(job, token, status)
    with transaction.atomic():
        if outcome in (Poll.FAILURE, Poll.REVOKED):
            target = RemoteJobState.FAILED if outcome == Poll.FAILURE else RemoteJobState.REVOKED
            if not guarded(
                job.pk,
                job.state,
                target,
                fence=fence,
                last_response=status.response or {"error": detail},
                credits_used=status.credits_used or job.credits_used,
                **release,
            ):
                return False
            _finish_job_attempt(job, detail)
            keep_incident(job, status.exchange, source="status", outcome=target, detail=detail)
            if outcome == Poll.FAILURE:
                # The provider says the job failed: a new attempt may be worth it (retry table).
                settle_tasks(job, ErrorClass.SERVER, detail or "the provider reported FAILURE")
            else:
                # Someone cancelled the job at the provider: a human decision, not a fault.
                task_states.release_from_job(
                    job.pk, TaskState.DEAD, last_error_class="remote_revoked"
                )
            return True
        if outcome == Poll.NOT_FOUND:
            moved = guarded(
                job.pk,
                job.state,
                RemoteJobState.LOOKUP_FAILED,
                fence=fence,
                last_response={"error": detail, "status": 404},
                **release,
            )
            if moved:
                keep_incident(
                    job,
                    status.exchange,
                    source="status",
                    outcome=RemoteJobState.LOOKUP_FAILED,
                    detail=detail,
                )
                log.warning("remote job %s: 404 on lookup -> lookup_failed (polling stops)", job.pk)
            return moved
        if outcome in (Poll.RETRY, Poll.RATE_LIMITED):
            failures = job.poll_failures + (1 if outcome == Poll.RETRY else 0)
            if failures > poll_failure_budget():
                given_up = f"{failures} status checks failed; last: {detail}"
                if not guarded(
                    job.pk,
                    job.state,
                    RemoteJobState.LOOKUP_FAILED,
                    fence=fence,
                    poll_failures=failures,
                    last_response={"error": given_up},
                    **release,
                ):
                    return False
                # The last failed answer ends the polling: it is the one support will ask for.
                keep_incident(
                    job,
                    status.exchange,
                    source="status",
                    outcome=RemoteJobState.LOOKUP_FAILED,
                    detail=given_up,
                )
                return True
            if status.retry_after is not None:
                delay = max(status.retry_after, provider.poll_interval)
            else:
                delay = provider.poll_interval + backoff(failures, provider.poll_interval, 60.0)
            return _still_pending(
                job, fence, release, now + timedelta(seconds=delay), failures, detail
            )
        # Still pending: poll again after the provider's interval, unless the deadline passed.
        if job.poll_deadline is not None and now >= job.poll_deadline:
            return guarded(
                job.pk,
                job.state,
                RemoteJobState.LOOKUP_FAILED,
                fence=fence,
                last_response={
                    **(status.response or {}),
                    "error": "deadline exceeded: the job is still not finished",
                    "deadline": job.poll_deadline.isoformat(),
                },
                **release,
            )
        return _still_pending(
            job,
            fence,
            release,
            now + timedelta(seconds=provider.poll_interval),
            0,
            "",
            response=status.response,
        )


def _still_pending(
    job: RemoteJob,
    fence: Mapping[str, object],
    release: Mapping[str, object],
    next_at: datetime,
    failures: int,
    detail: str,
    response: dict[str, Any] | None = None,
) -> bool:
    from recovery.models import RemoteJob

    check_move("remote job", ALLOWED, [job.state], RemoteJobState.PENDING)
    fields: dict[str, object] = {
        "state": RemoteJobState.PENDING,
        "next_poll_at": next_at,
        "poll_failures": failures,
        "updated_at": timezone.now(),
        **release,
    }
    if response:
        fields["last_response"] = response
    elif detail:
        fields["last_response"] = {"error": detail}
    return bool(RemoteJob.objects.filter(pk=job.pk, state=job.state, **fence).update(**fields))


def _finish_job_attempt(job: RemoteJob, detail: str = "") -> None:
    """The submission attempt stays `submitted` whatever the job became (the job's state says
    that); each task's execution is its own attempt, written by the import."""
    from recovery.models import Attempt

    if detail:
        Attempt.objects.filter(pk=job.attempt_id).update(error_detail=detail[:2000])
