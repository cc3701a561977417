"""Task execution: pending -> leased -> committed | retry_wait | quarantined | gone | dead.

An expired lease makes a leased task claimable again (leased -> leased with a new token).
A recovery batch resets selected tasks to pending for new attempts (terminal -> pending).
Counters (recovery.counters) are recorded in the same transaction as every move.
"""

from __future__ import annotations

from django.db import models, transaction
from django.utils import timezone

from recovery.states.base import IllegalTransition, check_move


class TaskState(models.TextChoices):
    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    COMMITTED = "committed"
    QUARANTINED = "quarantined"
    GONE = "gone"
    DEAD = "dead"


TERMINAL = frozenset({TaskState.COMMITTED, TaskState.QUARANTINED, TaskState.GONE, TaskState.DEAD})
CLAIMABLE = frozenset({TaskState.PENDING, TaskState.RETRY_WAIT, TaskState.LEASED})

ALLOWED: dict[str, frozenset[str]] = {
    TaskState.PENDING: frozenset({TaskState.LEASED}),
    TaskState.RETRY_WAIT: frozenset({TaskState.LEASED, TaskState.PENDING}),
    TaskState.LEASED: frozenset(
        {
            TaskState.LEASED,  # re-claim after the lease expired
            TaskState.COMMITTED,
            TaskState.RETRY_WAIT,
            TaskState.QUARANTINED,
            TaskState.GONE,
            TaskState.DEAD,
        }
    ),
    # Terminal states leave only through a recovery batch (reset for new attempts).
    TaskState.COMMITTED: frozenset({TaskState.PENDING}),
    TaskState.QUARANTINED: frozenset({TaskState.PENDING}),
    TaskState.GONE: frozenset({TaskState.PENDING}),
    TaskState.DEAD: frozenset({TaskState.PENDING}),
}

# Moves out of "leased" must present the lease: owner and token fence out stale workers.
FENCED_SOURCES = frozenset({TaskState.LEASED})


def move(
    task,
    source: str,
    target: str,
    *,
    owner: str | None = None,
    lease_token: int | None = None,
    **fields,
) -> bool:
    """Move one task from `source` to `target` if it is still there; True if it moved.

    `task` needs `pk`, `run_id` and `partition`. Moves out of `leased` require the owner and
    lease token of the current lease; a stale holder gets False and changes nothing.
    """
    from recovery import counters
    from recovery.models import Task

    check_move("task", ALLOWED, [source], target)
    filters = {"pk": task.pk, "state": source}
    if source in FENCED_SOURCES and source != target:
        if owner is None or lease_token is None:
            raise IllegalTransition("task: moves out of leased need owner and lease_token")
        filters.update(lease_owner=owner, lease_token=lease_token)
    elif owner is not None or lease_token is not None:
        # They are the fence, not new values: silently ignoring them here once let a caller
        # believe move(..., LEASED, lease_token=n) had set a new token. Claims set the lease
        # (recovery.leases); pass lease_owner=... in **fields to set an owner.
        raise IllegalTransition(
            f"task: owner/lease_token fence moves out of leased; {source} -> {target} has none"
        )
    if target != TaskState.LEASED:
        fields.setdefault("lease_owner", "")
        fields.setdefault("lease_until", None)
    with transaction.atomic():
        moved = Task.objects.filter(**filters).update(
            state=target, state_changed_at=timezone.now(), **fields
        )
        if moved and source != target:
            counters.record([(task.run_id, task.partition, source, target, 1)])
    return bool(moved)


def reset_for_batch(run_id: int, task_ids: list[int], batch_id: int) -> int:
    """Reset terminal tasks of a run to pending for a recovery batch; returns how many moved.

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
