"""A remote job's records and the helpers every phase shares: which datasets are remote,
their provider, the job's guarded state moves, its Attempt (the submission) and the engine's
view of the tasks it holds; plus the reads the dashboard and webhooks use."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet, Sum
from django.utils import timezone

from recovery import leases
from recovery.failures import Action, rule_for
from recovery.ops import incidents
from recovery.outcomes import ErrorClass, Outcome
from recovery.providers.remote_base import (
    Exchange,
    RemoteProvider,
    RemoteTask,
    sanitise,
)
from recovery.states.base import check_move
from recovery.states.choices import RemoteJobState, TaskState
from recovery.states.remote_job import ALLOWED, POLLABLE

if TYPE_CHECKING:
    from recovery.models import Dataset, RemoteJob, Run, Task

log = logging.getLogger(__name__)


# The provider's per-item statuses -> our failure classes (None = success). Only classes whose
# retry-table action is RETRY are resubmitted, in a new job: a timeout is worth another try, a
# challenge or an extraction failure needs a human first (seed 002's retry table).
ITEM_POLICY: dict[str, ErrorClass | None] = {
    "success": None,
    "ok": None,
    "timeout": ErrorClass.NETWORK,
    "failed": ErrorClass.NETWORK,  # Web Scraper Cloud: a page that failed after its retries
    "missing": ErrorClass.NETWORK,  # a submitted URL the job did not report at all
    "blocked_antibot": ErrorClass.CHALLENGE,
    "extraction_failed": ErrorClass.SELECTOR,
    "empty": ErrorClass.EMPTY_SHELL,
}


# Item statuses that send their task back for another try (the retry table's RETRY rows).
RETRIABLE_ITEM_STATUSES = [
    status
    for status, cls in ITEM_POLICY.items()
    if cls is not None and rule_for(cls).action == Action.RETRY
]


def is_remote(provider_name: str) -> bool:
    from recovery import providers

    factory = providers.known().get(provider_name)
    return bool(factory is not None and getattr(factory, "remote", False))


def remote_provider_names() -> list[str]:
    from recovery import providers

    known = providers.known()
    return [name for name, factory in known.items() if getattr(factory, "remote", False)]


# --- the worker loop's gate: skip the remote step where no remote work can exist -----------------
# worker_step reads RemoteJob 4-5 times; on a box with no remote dataset that was ~0.1 ms of CPU
# per page. Every row it acts on is a RemoteJob, so "no RemoteJob and no remote dataset" means
# the step has nothing to do. The answer is cached for RECHECK_SECONDS; this process's own
# create_job and `loaddataset` drop the cache, so only another process's new job waits (at most
# RECHECK_SECONDS, and its creator sends and polls it itself meanwhile).
RECHECK_SECONDS = 2.0
_presence: dict[str, float | bool] = {"at": float("-inf"), "present": False}


def forget_presence() -> None:
    """Ask the database again at the next gated step (a job or a remote dataset was added)."""
    _presence["at"] = float("-inf")


def remote_work_possible() -> bool:
    """Does a RemoteJob row, or a dataset with a remote provider, exist (cached briefly)?"""
    from recovery.models import Dataset, RemoteJob

    now = time.monotonic()
    if now - float(_presence["at"]) > RECHECK_SECONDS:
        _presence["present"] = (
            RemoteJob.objects.exists()
            or Dataset.objects.filter(provider__in=remote_provider_names()).exists()
        )
        _presence["at"] = now
    return bool(_presence["present"])


def provider_for(dataset: Dataset) -> RemoteProvider:
    from recovery.providers import get_provider

    options = dict((dataset.spec or {}).get("provider_options") or {})
    provider = get_provider(dataset.provider, **options)
    if not isinstance(provider, RemoteProvider):
        raise TypeError(f"dataset {dataset.name}: provider {dataset.provider!r} is not remote")
    return provider


def worker_label(job_pk: int) -> str:
    """The worker recorded on the attempts a job's import writes (not a lease owner)."""
    return f"remote:{job_pk}"


def lease_seconds() -> int:
    return int(getattr(settings, "SALVAGE_REMOTE_LEASE_SECONDS", 60))


def poll_failure_budget() -> int:
    return int(getattr(settings, "SALVAGE_REMOTE_POLL_FAILURES", 10))


def fault(name: str) -> None:
    """A crash point for the tests (recovery.faults: inert unless SALVAGE_FAULT_POINT names it):
    after_submit_before_save (the provider accepted the job, its id is not saved yet) and
    after_poll_before_commit (a status answer is in hand, nothing recorded)."""
    from recovery import faults

    faults.point(name)


def guarded(
    job_pk: int,
    source: str,
    target: str,
    fence: Mapping[str, object] | None = None,
    **fields: object,
) -> bool:
    """One compare-and-set UPDATE of a job's state (and its lease when `fence` is given)."""
    from recovery.models import RemoteJob

    check_move("remote job", ALLOWED, [source], target)
    return bool(
        RemoteJob.objects.filter(pk=job_pk, state=source, **(fence or {})).update(
            state=target, updated_at=timezone.now(), **fields
        )
    )


def keep_incident(
    job: RemoteJob, seen: Exchange | None, *, source: str, outcome: str, detail: str = ""
) -> None:
    """Keep a terminal answer about `job` as an Incident (seed 001 §04), in the caller's
    transaction: the one that records what the answer meant. No answer (the connection
    failed), no incident: there is no response to keep."""
    if seen is None:
        return
    incidents.record(
        seen,
        provider=job.provider,
        source=source,
        outcome=outcome,
        detail=detail,
        request_options=job.request_options or {},
        run_id=job.run_id,
        remote_job_id=job.pk,
        attempt_id=job.attempt_id,
        task_id=job.attempt.task_id,
    )


def tasks_of(job: RemoteJob) -> list[RemoteTask]:
    return [
        RemoteTask(t["id"], t["url"], t.get("navigation") or {})
        for t in (job.input_ref or {}).get("tasks", [])
    ]


def claimed_for(task: Task, run: Run, job: RemoteJob) -> leases.Claimed:
    """The engine's view of a task this job holds (its fence: the job + the task's token)."""
    dataset = run.dataset
    return leases.Claimed(
        task_id=task.pk,
        task_key=task.task_key,
        run_id=run.pk,
        url=task.url,
        page_type=task.page_type,
        partition=task.partition,
        depth=task.depth,
        navigation=dict(task.navigation or {}),
        attempt_count=task.attempt_count,
        lease_token=task.lease_token,
        previous_state=task.state,
        previous_owner="",
        first_attempt_at=task.first_attempt_at,
        recovery_batch_id=task.recovery_batch_id,
        dataset_id=dataset.pk,
        dataset=dataset.name,
        provider=dataset.provider,
        window=run.window,
        scraper_version=run.scraper_version,
        lease_seconds=(
            dataset.lease_seconds or dataset.lease_auto_seconds or settings.SALVAGE_LEASE_SECONDS
        ),
        max_attempts=dataset.max_attempts,
        max_elapsed_seconds=dataset.max_elapsed_seconds,
        started_at=job.submitted_at or job.created_at,
    )


def settle_tasks(
    job: RemoteJob, error_class: ErrorClass, detail: str, retry_after: float | None = None
) -> None:
    """Release the tasks a job still holds after a job-level failure, through the engine's
    fenced commit: the retry table and the budgets decide (retry_wait, quarantine, dead)."""
    from recovery.models import Run, Task

    run = Run.objects.select_related("dataset").get(pk=job.run_id)
    held = list(Task.objects.filter(state=TaskState.REMOTE, remote_job_id=job.pk).order_by("pk"))
    if not held:
        return
    outcome = Outcome(
        error_class=error_class,
        error_detail=detail[:2000],
        retry_after=retry_after,
        artefact={"reason": f"{job.provider} remote job {job.pk}: {detail}"[:1000]},
    )
    leases.commit_outcomes(
        worker_label(job.pk),
        [claimed_for(t, run, job) for t in held],
        [outcome] * len(held),
        holder=leases.Holder.job(job.pk),
    )


def create_job(
    run: Run,
    provider: RemoteProvider,
    task_rows: list[Task],
    *,
    worker: str,
    replaces: RemoteJob | None = None,
    lease: bool,
) -> RemoteJob:
    """Insert the Attempt (running) and the RemoteJob (created) for tasks; the caller's
    transaction commits them before anything is sent. `task_rows` are Task objects."""
    from recovery.models import Attempt, RemoteJob

    now = timezone.now()
    remote_tasks = [RemoteTask(t.pk, t.url, t.navigation or {}) for t in task_rows]
    attempt = Attempt.objects.create(
        task=task_rows[0],
        run=run,
        worker=worker,
        scraper_version=run.scraper_version,
        outcome=Attempt.Outcome.RUNNING,
        replaces=replaces.attempt if replaces is not None else None,
    )
    forget_presence()  # this process's gated worker step must now see the job
    input_ref: dict[str, object] = {
        "tasks": [{"id": t.task_id, "url": t.url, "navigation": t.navigation} for t in remote_tasks]
    }
    batches = {t.recovery_batch_id for t in task_rows} - {None}
    if len(batches) == 1:
        # A recovery batch's launch: the job carries exactly the URLs the batch selected.
        input_ref["recovery_batch"] = batches.pop()
    job = RemoteJob.objects.create(
        attempt=attempt,
        run=run,
        provider=provider.name,
        kind=provider.kind,
        input_ref=input_ref,
        request_options=sanitise(provider.request_options(remote_tasks, run.pk)),
        replaces=replaces,
        # lease_token 1 = "a sender has it": the creating worker sends right after COMMIT.
        lease_owner=worker if lease else "",
        lease_until=now + timedelta(seconds=lease_seconds()) if lease else None,
        lease_token=1 if lease else 0,
    )
    # The earlier items that sent these tasks back for another try now point at this job.
    from recovery.models import RemoteJobItem

    RemoteJobItem.objects.filter(
        job__run=run,
        task_id__in=[t.pk for t in task_rows],
        status__in=RETRIABLE_ITEM_STATUSES,
        retried_in__isnull=True,
    ).exclude(job=job).update(retried_in=job)
    return job


def credits_by_run(run_id: int) -> int:
    from recovery.models import RemoteJob

    return RemoteJob.objects.filter(run_id=run_id).aggregate(n=Sum("credits_used"))["n"] or 0


def reconcile_queue() -> QuerySet[RemoteJob]:
    """Jobs waiting for an operator: unknown submissions and lookup failures."""
    from recovery.models import RemoteJob
    from recovery.states.remote_job import RECONCILE

    return RemoteJob.objects.filter(state__in=list(RECONCILE)).order_by("updated_at")


def mark_due(job_pk: int) -> bool:
    """Ask for a prompt status check (a webhook's hint). A completed job is re-opened for a
    re-synchronisation (Continue can add rows to a finished job); nothing is imported here."""
    from recovery.models import RemoteJob

    now = timezone.now()
    with transaction.atomic():
        if RemoteJob.objects.filter(pk=job_pk, state__in=list(POLLABLE)).update(
            next_poll_at=now, updated_at=now
        ):
            return True
        job = RemoteJob.objects.filter(pk=job_pk).first()
        if job is None or job.state != RemoteJobState.COMPLETED:
            return False
        deadline = now + timedelta(seconds=provider_for(job.run.dataset).poll_timeout)
        return guarded(
            job_pk,
            RemoteJobState.COMPLETED,
            RemoteJobState.PENDING,
            next_poll_at=now,
            poll_deadline=deadline,
            poll_failures=0,
        )


def adopt_early_receipts(job_pk: int, provider: str, provider_job_id: str) -> int:
    """Attach notifications that arrived before this job's id was saved; make the job due.

    A provider can notify before our COMMIT of the id it just gave us (a job that finishes at
    once): that receipt was stored without its job. Both sides look again after their own
    commit (the submitter here, recovery.remote.webhooks after storing a receipt), so whichever
    commits last finds the other's row, and the hint is never left unattached.
    """
    from recovery.models import WebhookReceipt

    adopted = WebhookReceipt.objects.filter(
        provider=provider, provider_job_id=provider_job_id, job__isnull=True
    ).update(job=job_pk)
    if adopted:
        mark_due(job_pk)
    return adopted
