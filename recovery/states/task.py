"""Task execution: pending -> leased -> committed | retry_wait | quarantined | gone | dead.

An expired lease makes a leased task claimable again (leased -> leased with a new token).
A task a provider job holds is `remote` (not claimable, no lease): pending | retry_wait ->
remote when a job takes it (leased -> remote when the worker that claimed it hands it over,
fenced by its lease), remote -> committed | retry_wait | quarantined | gone | dead when the
job's results are imported (fenced by the job and the task's token), remote -> pending or
dead by an operator's reconcile decision (replace, dismiss) or a revoked job.
A recovery batch resets selected tasks to pending for new attempts (terminal -> pending).

Two doors move tasks: this module for the ORM moves (hand to a job, release from a job,
reset for a batch) and recovery.leases for the hot path (claim, heartbeat, fenced commit),
which takes its state lists from here. Counters (recovery.counters) are recorded in the same
transaction as every move.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from recovery.states.base import IllegalTransition, check_move
from recovery.states.choices import CLAIMABLE_ORDER, TaskState

if TYPE_CHECKING:
    from recovery.models import RemoteJob

TERMINAL = frozenset({TaskState.COMMITTED, TaskState.QUARANTINED, TaskState.GONE, TaskState.DEAD})
CLAIMABLE = frozenset(CLAIMABLE_ORDER)
# Where an import's outcome may send a task (the retry table decides which).
OUTCOMES = frozenset(
    {
        TaskState.COMMITTED,
        TaskState.RETRY_WAIT,
        TaskState.QUARANTINED,
        TaskState.GONE,
        TaskState.DEAD,
    }
)

ALLOWED: dict[str, frozenset[str]] = {
    TaskState.PENDING: frozenset({TaskState.LEASED, TaskState.REMOTE}),
    TaskState.RETRY_WAIT: frozenset({TaskState.LEASED, TaskState.REMOTE}),
    TaskState.LEASED: frozenset(
        {
            TaskState.LEASED,  # re-claim after the lease expired
            TaskState.REMOTE,  # the claiming worker hands it to a provider job
            *OUTCOMES,
        }
    ),
    # A provider job's import decides; an operator's replace (pending) or dismiss (dead).
    TaskState.REMOTE: frozenset({*OUTCOMES, TaskState.PENDING}),
    # Terminal states leave only through a recovery batch (reset for new attempts).
    TaskState.COMMITTED: frozenset({TaskState.PENDING}),
    TaskState.QUARANTINED: frozenset({TaskState.PENDING}),
    TaskState.GONE: frozenset({TaskState.PENDING}),
    TaskState.DEAD: frozenset({TaskState.PENDING}),
}


def sql_list(states: Iterable[str]) -> str:
    """`('a', 'b')` for the raw SQL of recovery.leases: the lists live here, once."""
    return "(" + ", ".join(f"'{TaskState(s).value}'" for s in states) + ")"


def _record(rows: Iterable[tuple[int, str, str]], target: str) -> None:
    """Counter deltas for (run_id, partition, source state) rows that moved to `target`."""
    from recovery import counters

    per: dict[tuple[int, str, str], int] = defaultdict(int)
    for run_id, partition, state in rows:
        per[(run_id, partition, state)] += 1
    counters.record([(r, p, s, target, n) for (r, p, s), n in per.items()])


def hand_to_job(
    job: RemoteJob,
    task_ids: list[int],
    *,
    sources: Iterable[str],
    fence: dict[int, int] | None = None,
    owner: str | None = None,
    count_attempt: bool = True,
) -> list[int]:
    """Move tasks into `remote`, held by `job` (a RemoteJob); returns the ids that moved.

    `sources` are the states the tasks are expected in (pending/retry_wait for a job that
    takes due tasks, or for an operator's replacement; leased for the worker that claimed
    them). Out of `leased`, `owner` and `fence` ({task id: lease_token}) are the worker's
    lease: a task whose lease moved on stays where it is. Each hand-over bumps the task's
    lease_token: the job's import presents it. Call inside the transaction that creates the
    job, so the job and its tasks commit together.
    """
    from recovery.models import Task

    sources = list(sources)
    check_move("task", ALLOWED, sources, TaskState.REMOTE)
    if TaskState.LEASED in sources and (owner is None or fence is None):
        raise IllegalTransition("task: moves out of leased need owner and lease tokens")
    if not task_ids:
        return []
    now = timezone.now()
    held = Q(pk__in=task_ids, state__in=sources)
    if fence is not None:
        tokens = Q()
        for pk in task_ids:
            tokens |= Q(pk=pk, lease_token=fence.get(pk, -1))
        held &= tokens & Q(lease_owner=owner)
    with transaction.atomic():
        # Read under the row locks the UPDATE will take (PostgreSQL), so the counters know
        # each row's source state; on SQLite the IMMEDIATE transaction already serialises.
        rows = list(
            Task.objects.select_for_update()
            .filter(held)
            .values_list("pk", "run_id", "partition", "state")
        )
        if not rows:
            return []
        ids = [r[0] for r in rows]
        moved = Task.objects.filter(pk__in=ids, state__in=sources).update(
            state=TaskState.REMOTE,
            remote_job=job,
            lease_owner="",
            lease_until=None,
            lease_token=F("lease_token") + 1,
            attempt_count=F("attempt_count") + (1 if count_attempt else 0),
            state_changed_at=now,
        )
        if moved != len(rows):  # the rows are locked by this transaction; a mismatch is a bug
            raise RuntimeError(f"remote job {job.pk}: task hand-over raced ({moved}/{len(rows)})")
        Task.objects.filter(pk__in=ids, first_attempt_at__isnull=True).update(first_attempt_at=now)
        _record([(r[1], r[2], r[3]) for r in rows], TaskState.REMOTE)
    return ids


def release_from_job(
    job_pk: int, target: str, task_ids: list[int] | None = None, **fields: object
) -> list[tuple[int, str]]:
    """Move the tasks `job_pk` still holds out of `remote` without an import: to pending (an
    operator's replacement, whose new job then takes them) or dead (dismissed, revoked).
    Returns the (task id, partition) pairs that moved."""
    from recovery.models import Task

    check_move("task", ALLOWED, [TaskState.REMOTE], target)
    held = Task.objects.filter(state=TaskState.REMOTE, remote_job_id=job_pk)
    if task_ids is not None:
        held = held.filter(pk__in=task_ids)
    with transaction.atomic():
        rows = list(held.select_for_update().values_list("pk", "run_id", "partition"))
        if not rows:
            return []
        now = timezone.now()
        if target == TaskState.PENDING:
            fields.setdefault("next_attempt_at", now)
        moved = Task.objects.filter(
            pk__in=[r[0] for r in rows], state=TaskState.REMOTE, remote_job_id=job_pk
        ).update(state=target, remote_job=None, state_changed_at=now, **fields)
        if moved != len(rows):
            raise RuntimeError(f"remote job {job_pk}: task release raced ({moved}/{len(rows)})")
        _record([(r[1], r[2], TaskState.REMOTE) for r in rows], target)
    return [(r[0], r[2]) for r in rows]


def give_back_after_outage(worker_id: str) -> list[tuple[int, int, str, int, int | None]]:
    """leased -> retry_wait, due now, for every lease `worker_id` still holds: called by a
    worker whose database came back after an outage, which dropped the batches in hand (their
    commits failed). A lease left to expire would be taken over as a crash (crash_count + 1);
    given back it is claimable at once and no claim counts it. Returns (task id, run id,
    partition, lease token, recovery batch id) of the tasks that moved."""
    from recovery.models import Task

    check_move("task", ALLOWED, [TaskState.LEASED], TaskState.RETRY_WAIT)
    with transaction.atomic():
        rows = list(
            Task.objects.select_for_update()
            .filter(state=TaskState.LEASED, lease_owner=worker_id)
            .values_list("pk", "run_id", "partition", "lease_token", "recovery_batch_id")
        )
        if not rows:
            return []
        now = timezone.now()
        # Fenced by owner and token, as a commit is: a lease taken over meanwhile stays.
        moved: list[tuple[int, int, str, int, int | None]] = []
        for pk, run_id, partition, token, batch_id in rows:
            if Task.objects.filter(
                pk=pk, state=TaskState.LEASED, lease_owner=worker_id, lease_token=token
            ).update(
                state=TaskState.RETRY_WAIT,
                lease_owner="",
                lease_until=None,
                next_attempt_at=now,
                state_changed_at=now,
            ):
                moved.append((pk, run_id, partition, token, batch_id))
        _record([(r[1], r[2], TaskState.LEASED) for r in moved], TaskState.RETRY_WAIT)
    return moved


def reset_for_batch(run_id: int, task_ids: list[int], batch_id: int) -> int:
    """Reset terminal tasks of a run to pending for a recovery batch, with fresh retry and
    crash budgets; returns how many moved.

    Only terminal tasks move (a task still in flight keeps its lease and finishes first).
    Counts are read under the same lock as the update so the counters stay exact.
    """
    from recovery import counters
    from recovery.models import Task

    moved_total = 0
    with transaction.atomic():
        rows = list(
            Task.objects.select_for_update()
            .filter(run_id=run_id, pk__in=task_ids, state__in=TERMINAL)
            .values_list("pk", "partition", "state")
        )
        changes: dict[tuple[str, str], int] = {}
        for _pk, partition, state in rows:
            changes[(partition, state)] = changes.get((partition, state), 0) + 1
        ids = [pk for pk, _p, _s in rows]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            moved_total += Task.objects.filter(pk__in=chunk, state__in=TERMINAL).update(
                state=TaskState.PENDING,
                state_changed_at=timezone.now(),
                next_attempt_at=timezone.now(),
                recovery_batch_id=batch_id,
                attempt_count=0,
                # A repaired page starts with a clean crash budget too: a worker_crash_loop
                # page kept crash_count at the budget, so the next claim quarantined it again
                # unfetched (the batch's audit entry counts the budgets reset).
                crash_count=0,
                first_attempt_at=None,
                lease_owner="",
                lease_until=None,
            )
        counters.record(
            [
                (run_id, partition, state, TaskState.PENDING, n)
                for (partition, state), n in changes.items()
            ]
        )
    return moved_total
