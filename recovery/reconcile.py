"""Operator resolutions of the reconcile queue (remote jobs in `unknown` or `lookup_failed`).

An ambiguous submission is never resubmitted without an operator's decision (guarantee 10):

- `attach_job_id`: the operator found the provider's job id -> attach it and poll it;
  a job that already has a different id refuses (a known id is never replaced).
- `replace_attempt`: the operator confirmed nothing was created -> a new attempt and a new
  RemoteJob linked to the original (`replaces`); the original stays visible as `replaced`.
- `dismiss`: the operator gives the work up; its tasks end `dead`, with the reason recorded.

Each opens its own transaction and writes an AuditEntry with the actor and the reason.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from recovery import audit, remote
from recovery.models import Attempt, RemoteJob
from recovery.states import remote_job
from recovery.states import task as task_states
from recovery.states.remote_job import RECONCILE, RemoteJobState
from recovery.states.task import TaskState


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


def _resolved(actor: str, reason: str) -> dict:
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
