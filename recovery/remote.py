"""The remote-job lifecycle shared by asynchronous providers (seeds 000, 001 and 003).

Submission and collection are two separate steps, each safe to crash in:

1. **Open**: due tasks of a remote dataset are taken into a RemoteJob (state `created`) together
   with its Attempt (outcome `running`: the submission, one per job) in one transaction that
   COMMITS before any create call. The tasks move to `remote`, held by the job
   (`Task.remote_job`, recovery.states.task.hand_to_job): no claim can take a remote task, so
   a task is never submitted twice behind the job's back.
2. **Send**: the sender leases the job (lease_token > 0) and commits that before sending. The
   provider's job id is saved as soon as it arrives (`states.remote_job.attach_job_id`). A send
   that may have reached the provider (read timeout, dropped connection, 5xx) moves the job to
   `unknown`; so does a `created` job whose sender's lease expired (it died mid-send). Unknown
   jobs wait for an operator (recovery.reconcile), never for an automatic resubmission.
3. **Poll**: due `submitted`/`pending` jobs are claimed many at once with a fenced lease on the
   RemoteJob row, polled concurrently at the provider's interval, each with its own deadline.
   A failed status request is retried within a bounded budget (poll_failures); 429 honours
   Retry-After; 404 -> `lookup_failed` (polling stops); SUCCESS / FAILURE / REVOKED are final.
4. **Import**: result items are written idempotently by (job, item_index) and mapped onto our
   tasks and observations in the transaction that marks the job `completed`, fenced by the
   job's lease token; each task's outcome goes through the engine's fenced commit
   (`leases.commit_outcomes`, fenced by the job and each task's token). Per-item failures are
   classified
   with the retry table; a retriable one sends its task to retry_wait and its next submission
   is a *new* job with a new attempt (RemoteJobItem.retried_in); the job is never resubmitted.

Entry points: the engine's worker hands claimed tasks of a remote dataset to `submit_claimed`
and runs `worker_step` every loop (registered below); the dispatcher's tick hook wakes
`recovery.remote_tasks.poll_remote_jobs` in django-q2 mode. Providers implement
`RemoteProvider` (below); they never touch the database.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from recovery import keys, leases, logs
from recovery.failures import Action, backoff, parse_retry_after, rule_for
from recovery.providers.base import ErrorClass, Observed, Outcome
from recovery.states import task as task_states
from recovery.states.base import check_move
from recovery.states.delivery import DeliveryState
from recovery.states.remote_job import ALLOWED, POLLABLE, RemoteJobState
from recovery.states.task import TaskState

log = logging.getLogger(__name__)
# httpx logs each request's full URL at INFO, and Web Scraper Cloud's token is a query
# parameter: redact on the logger itself, so every handler (and test capture) sees it clean.
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).addFilter(logs.RedactSecretsFilter())

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


# --- the provider side -------------------------------------------------------------------------


@dataclass(slots=True)
class RemoteTask:
    """What a provider needs to know about one task of a job (copied from input_ref)."""

    task_id: int
    url: str
    navigation: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Submitted:
    provider_job_id: str
    response: dict[str, Any] = field(default_factory=dict)  # sanitised


class SubmitRejected(Exception):
    """The provider certainly did not create a job (nothing sent, or an explicit refusal)."""

    def __init__(
        self,
        error_class: ErrorClass,
        detail: str,
        http_status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
        self.http_status = http_status
        self.retry_after = retry_after


class SubmitAmbiguous(Exception):
    """The request may have reached the provider: a job may exist (-> unknown, reconcile)."""

    def __init__(self, detail: str, http_status: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.http_status = http_status


@dataclass(slots=True)
class RemoteItem:
    """One result entry of a job. `payload` is None for a failed item."""

    index: int
    url: str
    status: str
    payload: dict[str, Any] | None = None
    task_url: str = ""  # the submitted URL this item came from, when it differs from `url`


class Poll:
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    REVOKED = "revoked"
    NOT_FOUND = "not_found"  # 404: unknown id or another tenant's job
    RETRY = "retry"  # the status request itself failed (network, 5xx): not a job failure
    RATE_LIMITED = "rate_limited"


@dataclass(slots=True)
class JobStatus:
    outcome: str  # a Poll value
    items: list[RemoteItem] = field(default_factory=list)
    credits_used: int | None = None
    stopped_reason: str = ""
    retry_after: float | None = None
    detail: str = ""
    response: dict[str, Any] = field(default_factory=dict)  # sanitised, kept in last_response
    result_ref: str = ""  # media: a stable object reference, not a temporary URL


class RemoteProvider(Protocol):
    name: str
    remote: bool  # True: the worker calls recovery.remote, never execute_many
    poll_interval: float  # seconds between status checks (2 s for seed 000's API)
    poll_timeout: float  # per-job deadline, seconds after submission
    kind: str  # RemoteJob.Kind of the jobs this provider opens
    tasks_per_job: int

    def request_options(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        """What will be sent, without credentials (stored in RemoteJob.request_options)."""
        ...

    async def submit(self, tasks: list[RemoteTask], run_id: int) -> Submitted:
        """Create the remote job; raise SubmitRejected or SubmitAmbiguous on failure."""
        ...

    async def status(self, provider_job_id: str) -> JobStatus:
        """Look the job up; on success include its items."""
        ...

    async def aclose(self) -> None: ...


# --- shared HTTP handling for the adapters -----------------------------------------------------

_SENT_ERRORS = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)
_NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def retry_after_of(response: httpx.Response) -> float | None:
    return parse_retry_after(response.headers.get("retry-after"), datetime.now(UTC))


def excerpt(response: httpx.Response, limit: int = 500) -> str:
    try:
        return logs.redact(response.text[:limit])
    except Exception:  # undecodable body: the status says enough
        return ""


async def send_create(
    client: httpx.AsyncClient, method: str, url: str, *, deadline: float, **kwargs
) -> httpx.Response:
    """Send a create request and sort its failures into "certainly not created" (SubmitRejected)
    and "may have been created" (SubmitAmbiguous). Returns the 2xx response."""
    safe_url = logs.redact(url)
    try:
        response = await asyncio.wait_for(client.request(method, url, **kwargs), deadline)
    except _NOT_SENT_ERRORS as exc:
        # No connection was made: the provider cannot have seen the request.
        raise SubmitRejected(ErrorClass.NETWORK, f"{type(exc).__name__} to {safe_url}") from None
    except (TimeoutError, *_SENT_ERRORS) as exc:
        raise SubmitAmbiguous(
            f"{type(exc).__name__} after sending to {safe_url}: the job may exist"
        ) from None
    except httpx.HTTPError as exc:
        raise SubmitAmbiguous(f"{type(exc).__name__} sending to {safe_url}") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    detail = f"HTTP {status} from {safe_url}: {excerpt(response, 200)}"
    if status == 429:
        raise SubmitRejected(ErrorClass.RATE_LIMITED, detail, status, retry_after_of(response))
    if status in (401, 403):
        raise SubmitRejected(ErrorClass.ACCESS, detail, status)
    if status == 503:
        # "Unavailable" refuses the request before processing it (with Retry-After).
        raise SubmitRejected(ErrorClass.SERVER, detail, status, retry_after_of(response))
    if 400 <= status < 500:
        raise SubmitRejected(ErrorClass.CLIENT_ERROR, detail, status)
    # 500/502/504: the server may have created the job before failing.
    raise SubmitAmbiguous(detail, status)


async def send_lookup(
    client: httpx.AsyncClient, url: str, *, deadline: float, **kwargs
) -> httpx.Response | JobStatus:
    """GET a status/data URL; a failed request becomes a JobStatus (RETRY, RATE_LIMITED,
    NOT_FOUND) instead of an exception, because a failed status check is not a job failure."""
    safe_url = logs.redact(url)
    try:
        response = await asyncio.wait_for(client.get(url, **kwargs), deadline)
    except (TimeoutError, httpx.HTTPError) as exc:
        return JobStatus(Poll.RETRY, detail=f"{type(exc).__name__} from {safe_url}")
    status = response.status_code
    if status == 404:
        return JobStatus(Poll.NOT_FOUND, detail=f"HTTP 404 from {safe_url}")
    if status == 429:
        return JobStatus(
            Poll.RATE_LIMITED, retry_after=retry_after_of(response), detail=f"HTTP 429 {safe_url}"
        )
    if status >= 300:
        return JobStatus(
            Poll.RETRY,
            retry_after=retry_after_of(response) if status == 503 else None,
            detail=f"HTTP {status} from {safe_url}: {excerpt(response, 200)}",
        )
    return response


# Field names that carry credentials (api_key, x-api-key, access_token, client_secret, ...);
# "object_key" or "sku" are data and stay.
_SECRET_FIELD = re.compile(
    r"(?i)^(x-)?(api[-_]?key|api[-_]?token|access[-_]?token|token|secret|password|"
    r"authorization|signature|sig)$|[-_](token|secret|password|api[-_]?key)$"
)


def sanitise(value: Any, depth: int = 0) -> Any:
    """A provider response safe to store: credentials redacted, long strings and lists cut."""
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            str(k)[:100]: sanitise(v, depth + 1)
            for k, v in list(value.items())[:50]
            if not _SECRET_FIELD.search(str(k))
        }
    if isinstance(value, list):
        return [sanitise(v, depth + 1) for v in value[:20]]
    if isinstance(value, str):
        return logs.redact(value[:1000])
    return value


def clean_payload(value: Any) -> Any:
    """A result item as data: complete (no cutting), minus credential fields and values."""
    if isinstance(value, dict):
        return {
            str(k): clean_payload(v) for k, v in value.items() if not _SECRET_FIELD.search(str(k))
        }
    if isinstance(value, list):
        return [clean_payload(v) for v in value]
    if isinstance(value, str):
        return logs.redact(value)
    return value


# --- helpers ----------------------------------------------------------------------------------


def is_remote(provider_name: str) -> bool:
    from recovery.providers import REGISTRY, builtin  # noqa: F401

    factory = REGISTRY.get(provider_name)
    return bool(factory is not None and getattr(factory, "remote", False))


def remote_provider_names() -> list[str]:
    from recovery.providers import REGISTRY, builtin  # noqa: F401

    return [name for name, factory in REGISTRY.items() if getattr(factory, "remote", False)]


def provider_for(dataset) -> RemoteProvider:
    from recovery.providers import get_provider

    options = dict((dataset.spec or {}).get("provider_options") or {})
    return get_provider(dataset.provider, **options)


def worker_label(job_pk: int) -> str:
    """The worker recorded on the attempts a job's import writes (not a lease owner)."""
    return f"remote:{job_pk}"


def lease_seconds() -> int:
    return int(getattr(settings, "SALVAGE_REMOTE_LEASE_SECONDS", 60))


def poll_failure_budget() -> int:
    return int(getattr(settings, "SALVAGE_REMOTE_POLL_FAILURES", 10))


def _fault(name: str) -> None:
    """A crash point for the tests (recovery.faults: inert unless SALVAGE_FAULT_POINT names it):
    after_submit_before_save (the provider accepted the job, its id is not saved yet) and
    after_poll_before_commit (a status answer is in hand, nothing recorded)."""
    from recovery import faults

    faults.point(name)


def _guarded(job_pk: int, source: str, target: str, fence: dict | None = None, **fields) -> bool:
    """One compare-and-set UPDATE of a job's state (and its lease when `fence` is given)."""
    from recovery.models import RemoteJob

    check_move("remote job", ALLOWED, [source], target)
    return bool(
        RemoteJob.objects.filter(pk=job_pk, state=source, **(fence or {})).update(
            state=target, updated_at=timezone.now(), **fields
        )
    )


def _tasks_of(job) -> list[RemoteTask]:
    return [
        RemoteTask(t["id"], t["url"], t.get("navigation") or {})
        for t in (job.input_ref or {}).get("tasks", [])
    ]


def _settle_tasks(job, error_class: ErrorClass, detail: str, retry_after=None) -> None:
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
        [_claimed_for(t, run, job) for t in held],
        [outcome] * len(held),
        holder=leases.Holder.job(job.pk),
    )


# --- opening jobs -------------------------------------------------------------------------------


def _create_job(run, provider, task_rows: list, *, worker: str, replaces=None, lease: bool):
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
    job = RemoteJob.objects.create(
        attempt=attempt,
        run=run,
        provider=provider.name,
        kind=provider.kind,
        input_ref={
            "tasks": [
                {"id": t.task_id, "url": t.url, "navigation": t.navigation} for t in remote_tasks
            ]
        },
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
            job = _create_job(run, provider, rows, worker=worker_id, lease=True)
            task_states.hand_to_job(
                job, [t.pk for t in rows], sources=[TaskState.PENDING, TaskState.RETRY_WAIT]
            )
            opened.append(job.pk)
    return opened


def submit_claimed(worker_id: str, claimed: list) -> bool:
    """The worker loop's step for a remote provider, instead of `execute_many`.

    `claimed` are TaskInputs the engine leased to `worker_id`; they are handed to new jobs
    (fenced by the worker's own lease tokens), committed, then sent.
    """
    from recovery.models import Run, Task

    if not claimed:
        return False
    by_run: dict[int, list] = defaultdict(list)
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
                job = _create_job(run, provider, rows, worker=worker_id, lease=True)
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
            if _guarded(
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


# --- sending ------------------------------------------------------------------------------------


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

    async def send_all():
        async def one(job):
            try:
                return await providers[job.pk].submit(_tasks_of(job), job.run_id)
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


def _record_send(job, provider, result) -> None:
    from recovery.models import Attempt

    now = timezone.now()
    fence = {"lease_owner": job.lease_owner, "lease_token": job.lease_token}
    if isinstance(result, Submitted):
        # The provider has the job; until the next line commits, only its id in flight exists.
        _fault("after_submit_before_save")
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
        return
    if isinstance(result, SubmitAmbiguous):
        with transaction.atomic():
            if _guarded(
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
        log.warning("remote job %s: submission outcome unknown -> reconcile: %s", job.pk, result)
        return
    # SubmitRejected: certainly nothing was created; the tasks follow the retry table.
    with transaction.atomic():
        if not _guarded(
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
        _settle_tasks(job, result.error_class, result.detail, result.retry_after)
    log.warning("remote job %s: create refused (%s): %s", job.pk, result.error_class, result)


def submit_step(worker_id: str) -> bool:
    """Open jobs for due tasks, claim unsent ones, send them all. True if it did work."""
    reaped = reap_abandoned_sends()
    pks = open_jobs(worker_id) + claim_unsent(worker_id)
    if pks:
        send_jobs(worker_id, pks)
    return bool(pks or reaped)


# --- polling ------------------------------------------------------------------------------------


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

    async def poll_all():
        async def one(job):
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
        _fault("after_poll_before_commit")
        try:
            record_poll(job, claimed[job.pk], status, providers[job.pk])
        except Exception:
            log.exception(
                "remote job %s: recording the poll failed; it will be polled again", job.pk
            )
    return True


def record_poll(job, token: int, status: JobStatus, provider) -> bool:
    """Commit one poll's answer, fenced by the job's lease token. False if we lost the lease."""
    now = timezone.now()
    fence = {"lease_token": token}
    release = {"lease_owner": "", "lease_until": None, "last_polled_at": now}
    detail = logs.redact(status.detail)
    outcome = status.outcome
    if outcome == Poll.SUCCESS:
        return import_results(job, token, status)
    with transaction.atomic():
        if outcome in (Poll.FAILURE, Poll.REVOKED):
            target = RemoteJobState.FAILED if outcome == Poll.FAILURE else RemoteJobState.REVOKED
            if not _guarded(
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
            if outcome == Poll.FAILURE:
                # The provider says the job failed: a new attempt may be worth it (retry table).
                _settle_tasks(job, ErrorClass.SERVER, detail or "the provider reported FAILURE")
            else:
                # Someone cancelled the job at the provider: a human decision, not a fault.
                task_states.release_from_job(
                    job.pk, TaskState.DEAD, last_error_class="remote_revoked"
                )
            return True
        if outcome == Poll.NOT_FOUND:
            moved = _guarded(
                job.pk,
                job.state,
                RemoteJobState.LOOKUP_FAILED,
                fence=fence,
                last_response={"error": detail, "status": 404},
                **release,
            )
            if moved:
                log.warning("remote job %s: 404 on lookup -> lookup_failed (polling stops)", job.pk)
            return moved
        if outcome in (Poll.RETRY, Poll.RATE_LIMITED):
            failures = job.poll_failures + (1 if outcome == Poll.RETRY else 0)
            if failures > poll_failure_budget():
                return _guarded(
                    job.pk,
                    job.state,
                    RemoteJobState.LOOKUP_FAILED,
                    fence=fence,
                    poll_failures=failures,
                    last_response={"error": f"{failures} status checks failed; last: {detail}"},
                    **release,
                )
            if status.retry_after is not None:
                delay = max(status.retry_after, provider.poll_interval)
            else:
                delay = provider.poll_interval + backoff(failures, provider.poll_interval, 60.0)
            return _still_pending(
                job, fence, release, now + timedelta(seconds=delay), failures, detail
            )
        # Still pending: poll again after the provider's interval, unless the deadline passed.
        if job.poll_deadline is not None and now >= job.poll_deadline:
            return _guarded(
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


def _still_pending(job, fence, release, next_at, failures, detail, response=None) -> bool:
    from recovery.models import RemoteJob

    check_move("remote job", ALLOWED, [job.state], RemoteJobState.PENDING)
    fields = {
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


def _finish_job_attempt(job, detail: str = "") -> None:
    """The submission attempt stays `submitted` whatever the job became (the job's state says
    that); each task's execution is its own attempt, written by the import."""
    from recovery.models import Attempt

    if detail:
        Attempt.objects.filter(pk=job.attempt_id).update(error_detail=detail[:2000])


# --- importing results ---------------------------------------------------------------------------


def _entity_key(spec: dict, item: RemoteItem, task_url: str = "") -> str:
    rule = (spec or {}).get("entity_key") or {"from": "url"}
    if "field" in rule and item.payload and item.payload.get(rule["field"]) not in (None, ""):
        return str(item.payload[rule["field"]])
    url = item.url or task_url  # a media result has no URL of its own: it is its task's
    try:
        return keys.canonical_url(url)
    except keys.InvalidURL:
        return url


def _task_for(item: RemoteItem, tasks: list[RemoteTask], by_url: dict[str, int], kind: str):
    if len(tasks) == 1 and kind != "batch":
        return tasks[0].task_id
    try:
        return by_url.get(keys.canonical_url(item.task_url or item.url))
    except keys.InvalidURL:
        return None


def import_results(job, token: int, status: JobStatus) -> bool:
    """Commit a SUCCESS job: items by (job, item_index), observations by key, task outcomes,
    retry job for retriable items, job -> completed, all in one transaction fenced by the
    job's lease token. Safe to repeat (a re-sync after Continue adds only the new items)."""
    from recovery.models import Observation, RemoteJob, RemoteJobItem, Run, Task

    now = timezone.now()
    with transaction.atomic():
        # The fence, and on PostgreSQL the row lock that serialises importers of this job.
        if not RemoteJob.objects.filter(
            pk=job.pk, lease_token=token, state__in=list(POLLABLE)
        ).update(updated_at=now):
            return False
        run = Run.objects.select_related("dataset").get(pk=job.run_id)
        spec = run.dataset.spec or {}
        tasks = _tasks_of(job)
        task_rows = {t.pk: t for t in Task.objects.filter(pk__in=[t.task_id for t in tasks])}
        by_url: dict[str, int] = {}
        for t in tasks:
            try:
                by_url[keys.canonical_url(t.url)] = t.task_id
            except keys.InvalidURL:
                by_url[t.url] = t.task_id
        existing = set(RemoteJobItem.objects.filter(job=job).values_list("item_index", flat=True))
        held = {
            pk
            for pk, t in task_rows.items()
            if t.state == TaskState.REMOTE and t.remote_job_id == job.pk
        }

        # Pass 1: classify the new items and decide each held task's outcome.
        new_items: list[tuple[RemoteItem, int | None, ErrorClass | None]] = []
        good: dict[int, int] = defaultdict(int)
        bad: dict[int, list[ErrorClass]] = defaultdict(list)
        reported: set[int] = set()
        for item in status.items:
            task_pk = _task_for(item, tasks, by_url, job.kind)
            if task_pk is not None:
                reported.add(task_pk)
            cls = ITEM_POLICY.get(item.status, ErrorClass.INTERNAL)
            if cls is None and item.payload is None:
                cls = ErrorClass.EMPTY_SHELL
            if item.index in existing:
                continue
            new_items.append((item, task_pk, cls))
            if task_pk is None:
                continue
            if cls is None:
                good[task_pk] += 1
            else:
                bad[task_pk].append(cls)
        if job.kind == "batch":
            for pk in held - reported:
                bad[pk].append(ErrorClass.NETWORK)  # submitted, but the job said nothing of it

        # Pass 2: one Outcome per task this job still holds, committed through the engine's
        # fenced commit (the job + each task's own lease token): observations
        # upserted by key, an attempt per task, counters, retry budgets and corrections of a
        # published run, exactly as for a directly fetched page. A retriable item sends its
        # task to retry_wait; the next submission takes it into a *new* job with a new
        # attempt (RemoteJobItem.retried_in), never this whole job again.
        entity_of: dict[int, str] = {}
        observed: dict[int, list[Observed]] = defaultdict(list)
        for item, task_pk, cls in new_items:
            if cls is None and task_pk is not None:
                task_url = task_rows[task_pk].url if task_pk in task_rows else ""
                entity_of[item.index] = _entity_key(spec, item, task_url)
                observed[task_pk].append(
                    Observed(
                        entity_of[item.index], clean_payload(item.payload) if item.payload else {}
                    )
                )
        claimed, outcomes = [], []
        for pk in sorted(held):
            claimed.append(_claimed_for(task_rows[pk], run, job))
            outcomes.append(_outcome_for(job, good.get(pk, 0), bad.get(pk, []), observed[pk]))
        summary = leases.commit_outcomes(
            worker_label(job.pk), claimed, outcomes, holder=leases.Holder.job(job.pk)
        )
        # A re-synchronisation (Continue) brings rows for tasks this job no longer holds:
        # their data goes through the same commit, for the tasks still committed (a task
        # reset or retried since belongs to another attempt), so a changed value of a
        # published run becomes a new version and a correction event, never an overwrite.
        resync = sorted(
            pk
            for pk in observed
            if pk not in held and task_rows.get(pk) and task_rows[pk].state == TaskState.COMMITTED
        )
        if resync:
            leases.commit_outcomes(
                worker_label(job.pk),
                [_claimed_for(task_rows[pk], run, job) for pk in resync],
                [Outcome(http_status=200, observations=observed[pk]) for pk in resync],
                holder=leases.Holder.resync(job.pk),
            )

        # Items, insert-if-missing by (job, item_index), pointing at their observations.
        obs_by_key = {}
        wanted = {
            keys.observation_key(run.dataset.name, key, run.window): index
            for index, key in entity_of.items()
        }
        if wanted:
            obs_by_key = {
                wanted[o.observation_key]: o
                for o in Observation.objects.filter(observation_key__in=list(wanted))
            }
        item_rows = []
        for item, task_pk, _cls in new_items:
            obs = obs_by_key.get(item.index)
            item_rows.append(
                RemoteJobItem(
                    job=job,
                    item_index=item.index,
                    url=logs.redact(item.url)[:2000],
                    status=item.status[:32],
                    task_id=task_pk,
                    observation=obs,
                )
            )
        RemoteJobItem.objects.bulk_create(item_rows, ignore_conflicts=True)

        stopped = (status.stopped_reason or "")[:64]
        fields = {
            "credits_used": status.credits_used
            if status.credits_used is not None
            else job.credits_used,
            "stopped_reason": stopped,
            "last_response": status.response,
            "lease_owner": "",
            "lease_until": None,
            "last_polled_at": now,
            "poll_failures": 0,
        }
        if status.result_ref:
            fields["result_ref"] = status.result_ref[:500]
        if not _guarded(
            job.pk, job.state, RemoteJobState.COMPLETED, fence={"lease_token": token}, **fields
        ):
            raise RuntimeError(f"remote job {job.pk}: lost its lease during the import")

        if stopped:
            note = (
                f"{job.provider} {job.kind} job {job.provider_job_id} stopped early "
                f"({stopped}): its results are incomplete"
            )
            Run.objects.filter(pk=run.pk).exclude(coverage_note__contains=note).update(
                coverage_note=(f"{run.coverage_note}\n{note}" if run.coverage_note else note)
            )
        if status.result_ref and getattr(provider_for(run.dataset), "handoff", False):
            from recovery import outbox

            # The media handoff is its own delivery machine, announced through the outbox in
            # this transaction, once: only the first import moves handoff_state from "".
            if RemoteJob.objects.filter(pk=job.pk, handoff_state="").update(
                handoff_state=DeliveryState.UNSENT
            ):
                outbox.enqueue(
                    run,
                    "media_handoff",
                    {
                        "remote_job": job.pk,
                        "provider": job.provider,
                        "provider_job_id": job.provider_job_id,
                        "result_ref": status.result_ref,
                    },
                )
    log.info(
        "remote job %s: imported %d new items; tasks %s",
        job.pk,
        len(new_items),
        summary.states or "unchanged",
    )
    return True


def _claimed_for(task, run, job):
    """The engine's view of a task this job holds (its fence: the job + the task's token)."""
    from recovery.leases import Claimed

    dataset = run.dataset
    return Claimed(
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
        lease_seconds=dataset.lease_seconds or settings.SALVAGE_LEASE_SECONDS,
        max_attempts=dataset.max_attempts,
        max_elapsed_seconds=dataset.max_elapsed_seconds,
        started_at=job.submitted_at or job.created_at,
    )


def _outcome_for(job, good: int, bad: list[ErrorClass], observed: list[Observed]) -> Outcome:
    """A task's result in this job: success if any item succeeded (or, for crawl/search/cloud
    jobs, if none failed); otherwise its items' worst class (a non-retriable one wins)."""
    where = {"reason": f"{job.provider} {job.kind} job {job.provider_job_id} (remote job {job.pk})"}
    if good or (job.kind != "batch" and not bad):
        return Outcome(http_status=200, observations=observed)
    classes = bad or [ErrorClass.NETWORK]
    final = [c for c in classes if rule_for(c).action != Action.RETRY]
    error_class = final[0] if final else classes[0]
    return Outcome(
        error_class=error_class,
        error_detail=f"item status {error_class} in {where['reason']}",
        artefact=where,
    )


# --- media handoff -------------------------------------------------------------------------------

_HANDOFF_PATH = {
    # handoff_state follows its outbox event through the delivery machine's allowed moves.
    DeliveryState.SENDING: [DeliveryState.SENDING],
    DeliveryState.DELIVERED: [DeliveryState.SENDING, DeliveryState.DELIVERED],
    DeliveryState.FAILED: [DeliveryState.SENDING, DeliveryState.FAILED],
    DeliveryState.UNCERTAIN: [DeliveryState.SENDING, DeliveryState.UNCERTAIN],
}


def sync_handoffs(limit: int = 100) -> int:
    """Mirror each media handoff's outbox delivery onto RemoteJob.handoff_state (guarded
    moves); returns how many jobs moved. The outbox does the delivering, once per event."""
    from recovery.models import OutboxEvent, RemoteJob
    from recovery.states import delivery

    open_states = [
        DeliveryState.UNSENT,
        DeliveryState.SENDING,
        DeliveryState.FAILED,
        DeliveryState.UNCERTAIN,
    ]
    jobs = list(
        RemoteJob.objects.filter(handoff_state__in=open_states).values_list("pk", "handoff_state")[
            :limit
        ]
    )
    moved = 0
    for pk, current in jobs:
        event = (
            OutboxEvent.objects.filter(event_type="media_handoff", payload__remote_job=pk)
            .order_by("created_at")
            .first()
        )
        if event is None or event.state == current:
            continue
        path = _HANDOFF_PATH.get(event.state, [])
        if current in path:
            path = path[path.index(current) + 1 :]
        with transaction.atomic():
            state = current
            for target in path:
                if target == state:
                    continue
                if not delivery.move(RemoteJob, pk, state, target, field="handoff_state"):
                    break
                state = target
            moved += state != current
    return moved


def fresh_result_url(job_id: int) -> str:
    """A working link to a completed media job's stored result, obtained by a lookup of the
    job (the stable `result_ref` names the object); never by regenerating the media, and never
    stored: it is a temporary credential of its own."""
    from recovery.models import RemoteJob

    job = RemoteJob.objects.select_related("run__dataset").get(pk=job_id)
    if not job.result_ref or not job.provider_job_id:
        raise ValueError(f"remote job {job_id} has no stored result reference")
    provider = provider_for(job.run.dataset)

    async def lookup() -> str:
        try:
            return await provider.result_url(job.provider_job_id, job.result_ref)
        finally:
            await provider.aclose()

    return asyncio.run(lookup())


# --- reading -----------------------------------------------------------------------------------


def credits_by_run(run_id: int) -> int:
    from recovery.models import RemoteJob

    return RemoteJob.objects.filter(run_id=run_id).aggregate(n=Sum("credits_used"))["n"] or 0


def reconcile_queue():
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
        return _guarded(
            job_pk,
            RemoteJobState.COMPLETED,
            RemoteJobState.PENDING,
            next_poll_at=now,
            poll_deadline=deadline,
            poll_failures=0,
        )


# --- steps (the worker loop and the django-q2 entry point call these) ----------------------------


def step(worker_id: str) -> bool:
    """One round: reap lost senders, open and send jobs, poll due jobs."""
    sent = submit_step(worker_id)
    polled = poll_step(worker_id)
    return sent or polled


def worker_step(worker_id: str) -> bool:
    """The step the engine's worker loop runs after each batch (recovery.worker hooks): the
    engine's claim already hands remote tasks to `submit_claimed`, so this step only sends
    jobs nobody sent yet (retries, operator replacements), reaps lost senders and polls."""
    reaped = reap_abandoned_sends()
    unsent = claim_unsent(worker_id)
    if unsent:
        send_jobs(worker_id, unsent)
    polled = poll_step(worker_id)
    handed = sync_handoffs()
    return bool(reaped or unsent or polled or handed)


def has_due_work() -> bool:
    """Is a remote job due: to send, to reap (its sender's lease ran out) or to poll?"""
    from recovery.models import RemoteJob

    now = timezone.now()
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    return RemoteJob.objects.filter(
        (Q(state__in=list(POLLABLE), next_poll_at__lte=now) & free)
        | Q(state=RemoteJobState.CREATED, lease_token=0)
        | Q(state=RemoteJobState.CREATED, lease_token__gt=0, lease_until__lt=now)
    ).exists()


_last_wake = {"at": 0.0}


def dispatch_hook() -> int:
    """Dispatcher tick hook (django-q2 mode): wake a cluster worker for due remote work, at
    most once a second (a duplicate wake-up is a no-op: the job leases decide)."""
    now = time.monotonic()
    if now - _last_wake["at"] < 1.0 or not has_due_work():
        return 0
    _last_wake["at"] = now
    from django_q.tasks import async_task

    async_task("recovery.remote_tasks.poll_remote_jobs", q_options={"group": "remote"})
    return 1


def _register_with_worker() -> None:
    from recovery import dispatch, worker

    worker.register_step(worker_step)
    worker.register_idle_check(_has_live_jobs)
    dispatch.register_tick_hook(dispatch_hook)


def _has_live_jobs() -> bool:
    from recovery.models import RemoteJob

    return RemoteJob.objects.filter(state__in=[RemoteJobState.CREATED, *POLLABLE]).exists()


_register_with_worker()
