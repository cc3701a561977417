"""The crash budget: attempts lost with their worker, apart from the retry budget.

An expired lease taken over is an attempt whose worker died (SIGKILL, OOM, a lost machine) or
stalled past its lease. It says nothing about the page unless the same page keeps doing it, so
it does not use the page's retry budget (plan.Claimed.retry_attempts); it counts in
Task.crash_count instead, incremented by the takeover itself. A page whose crashes reach
SALVAGE_CRASH_BUDGET is a poison page: the claim that would run it again quarantines it as
worker_crash_loop, with the lost attempts (which worker, when) as its evidence.

The claim hands out a suspect page alone (statements.is_suspect), so after the first crash only
the poison page itself keeps dying, not the batch neighbours it took down with it.

A database outage is no crash either: a worker that could not reach the database for longer
than its leases comes back alive, with leases that expired under it. `pardon_outage` (called by
`manage.py work` when its OutageGuard sees the database again) gives back the leases it still
holds (retry_wait, due now: no takeover counts them) and withdraws the crash that a takeover
of its leases during the outage counted; both attempts stay traceable as lost_lease, their
detail starting with OUTAGE_PREFIX, and are no crash-loop evidence.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from recovery.leases.plan import Claimed, dt_result
from recovery.outcomes import ErrorClass, Outcome
from recovery.states import task as task_states

# How the claim's takeover describes the lost attempt of an expired lease (postgres, sqlite).
TAKEOVER_PREFIX = "lease expired without a commit"
# Lost attempts of a worker that lost the database, not a crash.
OUTAGE_PREFIX = "database outage: "


def evidence(task_id: int) -> list[dict[str, str]]:
    """One entry per lost lease of the task: the worker that held it, its token, and when the
    takeover found it expired (a lease refused again at a stale worker's commit is the same
    lease: one entry)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lease_token, worker, MIN(finished_at) FROM recovery_attempt "
            "WHERE task_id = %s AND outcome = 'lost_lease' AND error_detail NOT LIKE %s "
            "GROUP BY lease_token, worker ORDER BY lease_token, worker",
            [task_id, OUTAGE_PREFIX + "%"],
        )
        rows = cursor.fetchall()
    found: list[dict[str, str]] = []
    for token, worker, at in rows:
        # Every lost_lease attempt is written with its finished_at; the column may be NULL.
        taken = dt_result(at)
        found.append(
            {
                "lease_token": str(token),
                "worker": worker,
                "taken_over_at": taken.isoformat() if taken else "",
            }
        )
    return found


def crash_loop_outcome(claimed: Claimed, budget: int) -> Outcome:
    """The outcome that quarantines a page whose workers died on it `budget` times."""
    crashes = evidence(claimed.task_id)
    workers = sorted({c["worker"] for c in crashes})
    detail = (
        f"worker crash loop: {claimed.crash_count} attempts lost with their worker "
        f"(crash budget SALVAGE_CRASH_BUDGET={budget}), on {len(workers)} worker(s): "
        f"{', '.join(workers)[:1500]}; not run again"
    )
    return Outcome(
        error_class=ErrorClass.WORKER_CRASH_LOOP,
        error_detail=detail,
        artefact={"worker_crashes": crashes},
    )


def over_budget(claimed: list[Claimed], budget: int) -> list[Claimed]:
    return [c for c in claimed if c.crash_count >= budget]


def pardon_outage(worker_id: str, noticed_at: datetime) -> tuple[int, int]:
    """`worker_id` lost the database at `noticed_at` and has it back: its leases are not crashes
    (see the module docstring). Returns (leases given back, takeovers pardoned).

    Takeovers are pardoned from one lease length before the outage was noticed: a worker whose
    connection hung first learns of the outage only when the driver gives up."""
    from recovery.models import Attempt, Run, Task

    since = noticed_at - timedelta(seconds=int(settings.SALVAGE_LEASE_SECONDS))
    with transaction.atomic():
        given = task_states.give_back_after_outage(worker_id)
        if given:
            now = timezone.now()
            versions = dict(
                Run.objects.filter(pk__in={r[1] for r in given}).values_list(
                    "pk", "scraper_version"
                )
            )
            Attempt.objects.bulk_create(
                Attempt(
                    id=uuid.uuid4(),
                    task_id=pk,
                    run_id=run_id,
                    recovery_batch_id=batch_id,
                    lease_token=token,
                    worker=worker_id,
                    scraper_version=versions.get(run_id, ""),
                    started_at=now,
                    finished_at=now,
                    outcome=Attempt.Outcome.LOST_LEASE,
                    error_detail=OUTAGE_PREFIX + "lease given back by its worker after the "
                    "database came back; not counted as a crash",
                )
                for pk, run_id, _partition, token, batch_id in given
            )
        taken = list(
            Attempt.objects.select_for_update()
            .filter(
                worker=worker_id,
                outcome=Attempt.Outcome.LOST_LEASE,
                finished_at__gte=since,
                error_detail__startswith=TAKEOVER_PREFIX,
            )
            .values_list("pk", "task_id", "error_detail")
        )
        for pk, task_id, detail in taken:
            Task.objects.filter(pk=task_id, crash_count__gt=0).update(
                crash_count=F("crash_count") - 1
            )
            Attempt.objects.filter(pk=pk).update(
                error_detail=f"{OUTAGE_PREFIX}{detail} while its worker could not reach the "
                "database; not counted as a crash"
            )
    return len(given), len(taken)
