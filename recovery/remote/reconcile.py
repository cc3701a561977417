"""Operator resolutions of the reconcile queue (remote jobs in `unknown` or `lookup_failed`).

An ambiguous submission is never resubmitted without an operator's decision (guarantee 10):

- `attach_job_id`: the operator found the provider's job id -> attach it and poll it;
  a job that already has a different id refuses (a known id is never replaced).
- `replace_attempt`: the operator confirmed nothing was created -> a new attempt and a new
  RemoteJob linked to the original (`replaces`); the original stays visible as `replaced`.
- `dismiss`: the operator gives the work up; its tasks end `dead`, with the reason recorded.

Each opens its own transaction and writes an AuditEntry with the actor and the reason.
`decide_many` takes one of the last two decisions for many jobs at once (the reconcile list's
bulk action): all or none, each job exactly as its single decision, audit entry included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from recovery import audit, remote
from recovery.models import Attempt, RemoteJob
from recovery.states import remote_job
from recovery.states import task as task_states
from recovery.states.choices import RemoteJobState, TaskState
from recovery.states.remote_job import RECONCILE


class ReconcileError(ValueError):
    """A resolution that does not apply (wrong state, missing reason, conflicting id)."""


def _open(job_id: int, reason: str) -> RemoteJob:
    if not (reason or "").strip():
        raise ReconcileError("a reason is required")
    try:
        job = RemoteJob.objects.select_for_update().select_related("run__dataset").get(pk=job_id)
    except RemoteJob.DoesNotExist:
        raise ReconcileError(f"remote job {job_id} does not exist") from None
    if job.state not in RECONCILE:
        raise ReconcileError(
            f"remote job {job_id} is {job.state}; only unknown or lookup_failed jobs are resolved"
        )
    return job


def _resolved(actor: str, reason: str) -> dict[str, object]:
    return {"resolution": reason.strip(), "resolved_by": actor, "resolved_at": timezone.now()}


def attach_job_id(job_id: int, provider_job_id: str, actor: str, reason: str) -> RemoteJob:
    provider_job_id = (provider_job_id or "").strip()
    if not provider_job_id:
        raise ReconcileError("a provider job id is required")
    with transaction.atomic():
        job = _open(job_id, reason)
        if job.provider_job_id and job.provider_job_id != provider_job_id:
            raise ReconcileError(
                f"remote job {job_id} already has job id {job.provider_job_id}; "
                "a known job id is never replaced"
            )
        provider = remote.provider_for(job.run.dataset)
        now = timezone.now()
        try:
            with transaction.atomic():
                remote_job.attach_job_id(
                    job.pk,
                    provider_job_id,
                    source=job.state,
                    next_poll_at=now,
                    poll_deadline=now + timedelta(seconds=provider.poll_timeout),
                    poll_failures=0,
                    lease_owner="",
                    lease_until=None,
                    **_resolved(actor, reason),
                )
        except IntegrityError:
            raise ReconcileError(
                f"job id {provider_job_id} already belongs to another remote job"
            ) from None
        except ValueError as exc:
            raise ReconcileError(str(exc)) from None
        Attempt.objects.filter(pk=job.attempt_id).update(outcome=Attempt.Outcome.SUBMITTED)
        job.refresh_from_db()
        audit.record(
            actor, "remote_attach", job, reason, provider_job_id=provider_job_id, was=job.state
        )
    return job


def replace_attempt(job_id: int, actor: str, reason: str) -> RemoteJob:
    with transaction.atomic():
        job = _open(job_id, reason)
        if not remote_job.move(
            job.pk, job.state, RemoteJobState.REPLACED, **_resolved(actor, reason)
        ):
            raise ReconcileError(f"remote job {job_id} changed state meanwhile")
        from recovery.models import Task

        held = list(Task.objects.filter(state=TaskState.REMOTE, remote_job_id=job.pk))
        if not held:
            raise ReconcileError(f"remote job {job_id} holds no task any more")
        provider = remote.provider_for(job.run.dataset)
        # A new attempt and a new job (never sent: lease_token 0), linked to the original; the
        # tasks leave the original (remote -> pending) and the new job takes them (-> remote)
        # in this transaction, so the original can never commit them.
        replacement = remote.create_job(
            job.run, provider, held, worker=f"operator:{actor}", replaces=job, lease=False
        )
        released = task_states.release_from_job(job.pk, TaskState.PENDING)
        task_states.hand_to_job(
            replacement, [pk for pk, _partition in released], sources=[TaskState.PENDING]
        )
        audit.record(actor, "remote_replace", job, reason, replacement=replacement.pk)
    return replacement


def dismiss(job_id: int, actor: str, reason: str) -> RemoteJob:
    with transaction.atomic():
        job = _open(job_id, reason)
        if not remote_job.move(
            job.pk, job.state, RemoteJobState.DISMISSED, **_resolved(actor, reason)
        ):
            raise ReconcileError(f"remote job {job_id} changed state meanwhile")
        moved = task_states.release_from_job(
            job.pk, TaskState.DEAD, last_error_class="remote_dismissed"
        )
        audit.record(actor, "remote_dismiss", job, reason, tasks=len(moved))
        job.refresh_from_db()
    return job


# The decisions one reason can settle for many jobs (attaching needs each job's own id).
BULK_DECISIONS: dict[str, Callable[[int, str, str], RemoteJob]] = {
    "replace": replace_attempt,
    "dismiss": dismiss,
}
MAX_JOBS = 200  # per bulk decision: each job is its own savepoint, audit entry and new job


def _job_ids(job_ids: Sequence[int | str]) -> list[int]:
    try:
        ids = sorted({int(pk) for pk in job_ids})
    except (TypeError, ValueError):
        raise ReconcileError("the selection holds something that is not a job number") from None
    if not ids:
        raise ReconcileError("select at least one remote job")
    if len(ids) > MAX_JOBS:
        raise ReconcileError(f"select at most {MAX_JOBS} remote jobs at once, not {len(ids)}")
    return ids


def open_jobs(job_ids: Sequence[int | str]) -> list[RemoteJob]:
    """The selected jobs that await a decision, in job order: what `decide_many` decides."""
    return list(
        RemoteJob.objects.select_related("run__dataset")
        .filter(pk__in=_job_ids(job_ids), state__in=sorted(RECONCILE))
        .order_by("pk")
    )


def decide_many(
    decision: str, job_ids: Sequence[int | str], actor: str, reason: str, *, expected: int
) -> list[RemoteJob]:
    """`decision` (replace or dismiss) for each selected job that awaits one, all or none.

    `expected` is how many the operator confirmed: when the selection now holds a different
    number of open jobs (one was decided meanwhile), nothing is decided. Each job goes through
    its single decision in this transaction, so its rows and its audit entry are exactly those
    of deciding it alone; a refusal of any one rolls back all of them.
    """
    action = BULK_DECISIONS.get(decision)
    if action is None:
        raise ReconcileError(f"unknown decision {decision!r}; one of {', '.join(BULK_DECISIONS)}")
    if not (reason or "").strip():
        raise ReconcileError("a reason is required")
    ids = _job_ids(job_ids)
    with transaction.atomic():
        # The selection's open jobs locked in job order, so two overlapping bulk decisions
        # wait for each other instead of deadlocking; each single decision locks its own again.
        open_ids = list(
            RemoteJob.objects.select_for_update()
            .filter(pk__in=ids, state__in=sorted(RECONCILE))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if not open_ids:
            raise ReconcileError("none of the selected remote jobs awaits a decision")
        if len(open_ids) != expected:
            raise ReconcileError(
                f"{len(open_ids)} of the selected remote jobs await a decision now, not the "
                f"{expected} you confirmed; nothing was decided, review it again"
            )
        return [action(pk, actor, reason) for pk in open_ids]
