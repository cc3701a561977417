"""The workers page's reads: live task leases, and the tasks that provider jobs hold.

A task handed to an asynchronous provider is held by its RemoteJob, not by a worker's lease:
it is shown as "held by job #N (provider, submitted …)", never as a lease date.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from recovery.models import RemoteJob, Run, Task
from recovery.states.run import RunState
from recovery.states.task import TaskState

# Leases ending within this many seconds are flagged "about to expire".
LEASE_WARNING = timedelta(seconds=30)
LIMIT = 200
# TODO(remote): while provider-held tasks are parked as `leased` until year 9000 under the
# owner "remote:<job pk>", this prefix tells them apart; with TaskState.REMOTE and
# Task.remote_job they become `state=remote` rows that name their job.
REMOTE_OWNER = "remote:"


@dataclass(slots=True)
class Lease:
    task: Task
    expired: bool
    expiring: bool


@dataclass(slots=True)
class Held:
    task: Task
    job: RemoteJob | None  # None: the owner names a job that no longer exists


def _active_runs():
    # Leased tasks of collecting runs through the (run, state) index: at most workers x claim
    # batch rows, whatever the runs' sizes.
    return Run.objects.filter(acceptance_state=RunState.COLLECTING).values("pk")[:LIMIT]


def live_leases(now: datetime) -> list[Lease]:
    rows = (
        Task.objects.filter(run_id__in=_active_runs(), state=TaskState.LEASED)
        .exclude(lease_owner__startswith=REMOTE_OWNER)
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
    rows = list(
        Task.objects.filter(
            run_id__in=_active_runs(),
            state=TaskState.LEASED,
            lease_owner__startswith=REMOTE_OWNER,
        )
        .select_related("run__dataset")
        .order_by("run_id", "pk")[:LIMIT]
    )
    wanted = {_job_pk(t.lease_owner) for t in rows} - {None}
    jobs = RemoteJob.objects.in_bulk(wanted)
    return [Held(t, jobs.get(_job_pk(t.lease_owner))) for t in rows]


def _job_pk(owner: str) -> int | None:
    try:
        return int(owner.removeprefix(REMOTE_OWNER))
    except ValueError:
        return None
