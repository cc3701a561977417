"""The crash budget: attempts lost with their worker, apart from the retry budget.

An expired lease taken over is an attempt whose worker died (SIGKILL, OOM, a lost machine) or
stalled past its lease. It says nothing about the page unless the same page keeps doing it, so
it does not use the page's retry budget (plan.Claimed.retry_attempts); it counts in
Task.crash_count instead, incremented by the takeover itself. A page whose crashes reach
SALVAGE_CRASH_BUDGET is a poison page: the claim that would run it again quarantines it as
worker_crash_loop, with the lost attempts (which worker, when) as its evidence.

The claim hands out a suspect page alone (statements.is_suspect), so after the first crash only
the poison page itself keeps dying, not the batch neighbours it took down with it.
"""

from __future__ import annotations

from django.db import connection

from recovery.leases.plan import Claimed, dt_result
from recovery.providers.base import ErrorClass, Outcome


def evidence(task_id: int) -> list[dict[str, str]]:
    """One entry per lost lease of the task: the worker that held it, its token, and when the
    takeover found it expired (a lease refused again at a stale worker's commit is the same
    lease: one entry)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lease_token, worker, MIN(finished_at) FROM recovery_attempt "
            "WHERE task_id = %s AND outcome = 'lost_lease' "
            "GROUP BY lease_token, worker ORDER BY lease_token, worker",
            [task_id],
        )
        rows = cursor.fetchall()
    return [
        {"lease_token": str(token), "worker": worker, "taken_over_at": dt_result(at).isoformat()}
        for token, worker, at in rows
    ]


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
