"""The workers page's reads: live task leases, and the tasks that provider jobs hold.

A task handed to an asynchronous provider is held by its RemoteJob, not by a worker's lease:
it is shown as "held by job #N (provider, submitted …)", never as a lease date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from recovery.models import RemoteJob, Run, Task
from recovery.states.choices import RunState, TaskState

# Leases ending within this many seconds are flagged "about to expire".
LEASE_WARNING = timedelta(seconds=30)
LIMIT = 200


@dataclass(slots=True)
class Lease:
    task: Task
    expired: bool
    expiring: bool


@dataclass(slots=True)
class Held:
    task: Task
    job: RemoteJob


def _active_runs():
    # Leased tasks of collecting runs through the (run, state) index: at most workers x claim
    # batch rows, whatever the runs' sizes.
    return Run.objects.filter(acceptance_state=RunState.COLLECTING).values("pk")[:LIMIT]


def live_leases(now: datetime) -> list[Lease]:
    rows = (
        Task.objects.filter(run_id__in=_active_runs(), state=TaskState.LEASED)
        .select_related("run__dataset")
        .order_by("lease_until")[:LIMIT]
    )
    out = []
    for task in rows:
        expired = bool(task.lease_until and task.lease_until <= now)
        expiring = bool(
            task.lease_until and not expired and task.lease_until <= now + LEASE_WARNING
        )
        out.append(Lease(task, expired, expiring))
    return out


def held_by_jobs() -> list[Held]:
    rows = (
        Task.objects.filter(run_id__in=_active_runs(), state=TaskState.REMOTE)
        .select_related("run__dataset", "remote_job")
        .order_by("run_id", "pk")[:LIMIT]
    )
    return [Held(t, t.remote_job) for t in rows]
