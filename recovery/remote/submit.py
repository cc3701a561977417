"""Open and send jobs: record the job and its Attempt, hand the tasks to it (`remote`),
COMMIT, then send the create call; an ambiguous send goes to `unknown` (reconcile), a sender
that died mid-call is reaped to `unknown` too. Nothing is ever resubmitted automatically."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from recovery.ops import logs
from recovery.outcomes import TaskInput
from recovery.providers.remote_base import (
    RemoteProvider,
    SubmitAmbiguous,
    SubmitRejected,
    Submitted,
    sanitise,
)
from recovery.remote.jobs import (
    adopt_early_receipts,
    create_job,
    fault,
    guarded,
    keep_incident,
    lease_seconds,
    provider_for,
    remote_provider_names,
    settle_tasks,
    tasks_of,
)
from recovery.states import task as task_states
from recovery.states.choices import RemoteJobState, TaskState

if TYPE_CHECKING:
    from recovery.models import RemoteJob

log = logging.getLogger(__name__)

# What a create call came to: the job's id, or why there is none (or may be one).
SendResult = Submitted | SubmitRejected | SubmitAmbiguous


def open_jobs(worker_id: str, *, max_jobs: int = 4) -> list[int]:
    """Take due tasks of remote datasets into new jobs (committed before any send).

    Returns the pks of the jobs opened, already leased to `worker_id` for sending.
    """
    from recovery.models import Task

    names = remote_provider_names()
    opened: list[int] = []
    for _ in range(max_jobs):
        with transaction.atomic():
            now = timezone.now()
            due = (
                Task.objects.select_for_update(skip_locked=True)
                .filter(
                    state__in=[TaskState.PENDING, TaskState.RETRY_WAIT],
                    next_attempt_at__lte=now,
                    run__dataset__provider__in=names,
                )
                .order_by("-priority", "next_attempt_at")
            )
            first = due.select_related("run__dataset").first()
            if first is None:
                break
            run = first.run
            provider = provider_for(run.dataset)
            rows = list(due.filter(run=run)[: max(1, provider.tasks_per_job)])
            job = create_job(run, provider, rows, worker=worker_id, lease=True)
            task_states.hand_to_job(
                job, [t.pk for t in rows], sources=[TaskState.PENDING, TaskState.RETRY_WAIT]
            )
            opened.append(job.pk)
    return opened


def submit_claimed(worker_id: str, claimed: list[TaskInput]) -> bool:
    """The worker loop's step for a remote provider, instead of `execute_many`.

    `claimed` are TaskInputs the engine leased to `worker_id`; they are handed to new jobs
    (fenced by the worker's own lease tokens), committed, then sent.
    """
    from recovery.models import Run, Task

    if not claimed:
        return False
    by_run: dict[int, list[TaskInput]] = defaultdict(list)
    for t in claimed:
        by_run[t.run_id].append(t)
    jobs: list[int] = []
    for run_id, inputs in by_run.items():
        run = Run.objects.select_related("dataset").get(pk=run_id)
        provider = provider_for(run.dataset)
        size = max(1, provider.tasks_per_job)
        for start in range(0, len(inputs), size):
            chunk = inputs[start : start + size]
            with transaction.atomic():
                fence = Q()
                for t in chunk:
                    fence |= Q(pk=t.task_id, lease_token=t.lease_token)
                rows = list(
                    Task.objects.filter(fence, state=TaskState.LEASED, lease_owner=worker_id)
                )
                if not rows:
                    continue  # every lease was lost meanwhile: nothing to submit
                job = create_job(run, provider, rows, worker=worker_id, lease=True)
                task_states.hand_to_job(
                    job,
                    [t.pk for t in rows],
                    sources=[TaskState.LEASED],
                    owner=worker_id,
                    fence={t.pk: t.lease_token for t in rows},
                    count_attempt=False,  # the engine's claim counted this attempt
                )
                jobs.append(job.pk)
    if jobs:
        send_jobs(worker_id, jobs)
    return bool(jobs)


def claim_unsent(worker_id: str, limit: int = 20) -> list[int]:
    """Lease `created` jobs that no sender ever took (retry and replacement jobs)."""
    from recovery.models import RemoteJob

    if not RemoteJob.objects.filter(state=RemoteJobState.CREATED, lease_token=0).exists():
        return []  # a plain read first (see claim_due_polls)
    with transaction.atomic():
        pks = list(
            RemoteJob.objects.select_for_update(skip_locked=True)
            .filter(state=RemoteJobState.CREATED, lease_token=0)
            .order_by("pk")
            .values_list("pk", flat=True)[:limit]
        )
        if not pks:
            return []
        RemoteJob.objects.filter(pk__in=pks, lease_token=0).update(
            lease_owner=worker_id,
            lease_token=1,
            lease_until=timezone.now() + timedelta(seconds=lease_seconds()),
            updated_at=timezone.now(),
        )
    return pks


def reap_abandoned_sends() -> int:
    """A `created` job whose sender's lease expired: the sender died somewhere around the
    create call, so the provider may or may not have the job -> unknown (reconcile)."""
    from recovery.models import Attempt, RemoteJob

    moved = 0
    now = timezone.now()
    stale = RemoteJob.objects.filter(
        state=RemoteJobState.CREATED, lease_token__gt=0, lease_until__lt=now
    ).values_list("pk", "lease_token", "attempt_id")
    for pk, token, attempt_id in list(stale):
        with transaction.atomic():
            if guarded(
                pk,
                RemoteJobState.CREATED,
                RemoteJobState.UNKNOWN,
                fence={"lease_token": token, "lease_until__lt": now},
                lease_owner="",
                lease_until=None,
                last_response={"error": "the sender stopped during the create call"},
            ):
                Attempt.objects.filter(pk=attempt_id).update(
                    outcome=Attempt.Outcome.UNKNOWN,
                    finished_at=now,
                    error_detail="sender lost during the create call; the job may exist",
                )
                moved += 1
                log.warning("remote job %s: sender lost mid-send -> unknown (reconcile)", pk)
    return moved


def send_jobs(worker_id: str, job_pks: list[int]) -> int:
    """Send the create call of each job leased to us; record each outcome. Returns jobs sent."""
    from recovery.models import RemoteJob

    jobs = list(
        RemoteJob.objects.select_related("run__dataset").filter(
            pk__in=job_pks, state=RemoteJobState.CREATED, lease_owner=worker_id
        )
    )
    if not jobs:
        return 0
    providers = {job.pk: provider_for(job.run.dataset) for job in jobs}

    async def send_all() -> list[SendResult]:
        async def one(job: RemoteJob) -> SendResult:
            try:
                return await providers[job.pk].submit(tasks_of(job), job.run_id)
            except (SubmitRejected, SubmitAmbiguous) as exc:
                return exc
            except Exception as exc:  # an adapter bug: we cannot tell what was sent
                return SubmitAmbiguous(f"{type(exc).__name__}: {logs.redact(str(exc))}")

        try:
            return await asyncio.gather(*(one(job) for job in jobs))
        finally:
            for provider in providers.values():
                await provider.aclose()

    results = asyncio.run(send_all())
    for job, result in zip(jobs, results, strict=True):
        _record_send(job, providers[job.pk], result)
    return len(jobs)


def _record_send(job: RemoteJob, provider: RemoteProvider, result: SendResult) -> None:
    from recovery.models import Attempt

    now = timezone.now()
    fence = {"lease_owner": job.lease_owner, "lease_token": job.lease_token}
    if isinstance(result, Submitted):
        # The provider has the job; until the next line commits, only its id in flight exists.
        fault("after_submit_before_save")
        poll = {
            "next_poll_at": now + timedelta(seconds=provider.poll_interval),
            "poll_deadline": now + timedelta(seconds=provider.poll_timeout),
            "lease_owner": "",
            "lease_until": None,
            "last_response": sanitise(result.response),
            "poll_failures": 0,
        }
        with transaction.atomic():
            from recovery.states import remote_job

            try:
                remote_job.attach_job_id(job.pk, result.provider_job_id, **poll)
            except ValueError:
                # Our lease expired meanwhile and the reaper parked the job in `unknown`: we do
                # know the id for certain, so attach it there (the operator's move, with proof).
                remote_job.attach_job_id(
                    job.pk, result.provider_job_id, source=RemoteJobState.UNKNOWN, **poll
                )
            Attempt.objects.filter(pk=job.attempt_id).update(
                outcome=Attempt.Outcome.SUBMITTED, finished_at=now
            )
        log.info("remote job %s: %s job %s submitted", job.pk, job.provider, result.provider_job_id)
        adopt_early_receipts(job.pk, job.provider, result.provider_job_id)
        return
    if isinstance(result, SubmitAmbiguous):
        with transaction.atomic():
            if guarded(
                job.pk,
                RemoteJobState.CREATED,
                RemoteJobState.UNKNOWN,
                fence=fence,
                lease_owner="",
                lease_until=None,
                last_response={"error": result.detail, "status": result.http_status},
            ):
                Attempt.objects.filter(pk=job.attempt_id).update(
                    outcome=Attempt.Outcome.UNKNOWN,
                    finished_at=now,
                    http_status=result.http_status,
                    error_detail=result.detail,
                )
                keep_incident(
                    job,
                    result.exchange,
                    source="submit",
                    outcome=RemoteJobState.UNKNOWN,
                    detail=result.detail,
                )
        log.warning("remote job %s: submission outcome unknown -> reconcile: %s", job.pk, result)
        return
    # SubmitRejected: certainly nothing was created; the tasks follow the retry table.
    with transaction.atomic():
        if not guarded(
            job.pk,
            RemoteJobState.CREATED,
            RemoteJobState.FAILED,
            fence=fence,
            lease_owner="",
            lease_until=None,
            last_response={"error": result.detail, "status": result.http_status},
        ):
            return
        # The submission was refused; each task's own attempt (below) says what follows.
        Attempt.objects.filter(pk=job.attempt_id).update(
            outcome=Attempt.Outcome.REFUSED,
            finished_at=now,
            http_status=result.http_status,
            error_class=str(result.error_class),
            error_detail=result.detail,
        )
        keep_incident(
            job,
            result.exchange,
            source="submit",
            outcome=str(result.error_class),
            detail=result.detail,
        )
        settle_tasks(job, result.error_class, result.detail, result.retry_after)
    log.warning("remote job %s: create refused (%s): %s", job.pk, result.error_class, result)


def submit_step(worker_id: str) -> bool:
    """Open jobs for due tasks, claim unsent ones, send them all. True if it did work."""
    reaped = reap_abandoned_sends()
    pks = open_jobs(worker_id) + claim_unsent(worker_id)
    if pks:
        send_jobs(worker_id, pks)
    return bool(pks or reaped)
