"""The steps the engine runs: `worker_step` (recovery.worker.STEPS and the django-q2 entry
point recovery.tasks.poll_remote_jobs), the dispatcher's tick hook `dispatch_hook`
(recovery.dispatch.TICK_HOOKS) and `has_live_jobs`, an idle check of `work --until-idle`."""

from __future__ import annotations

import logging
import time

from django.db.models import Q
from django.utils import timezone

from recovery.remote.handoff import sync_handoffs
from recovery.remote.jobs import remote_work_possible
from recovery.remote.poll import poll_step
from recovery.remote.submit import claim_unsent, reap_abandoned_sends, send_jobs, submit_step
from recovery.states.choices import RemoteJobState
from recovery.states.remote_job import POLLABLE

log = logging.getLogger(__name__)


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


def gated_worker_step(worker_id: str) -> bool:
    """worker_step, skipped while no remote work can exist (recovery.worker.STEPS)."""
    return remote_work_possible() and worker_step(worker_id)


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

    async_task("recovery.tasks.poll_remote_jobs", q_options={"group": "remote"})
    return 1


def has_live_jobs() -> bool:
    from recovery.models import RemoteJob

    return RemoteJob.objects.filter(state__in=[RemoteJobState.CREATED, *POLLABLE]).exists()
