"""Task-state counters per (run, partition, state) that stay cheap at a million tasks.

Every task move appends delta rows in the mover's transaction (append-only, so concurrent
committers never wait on a shared counter row). Readers sum the few rows left after
`compact()` folds them; `rebuild()` recounts from the task table when in doubt.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import Count, Sum

# (run_id, partition, old_state or None for a new task, new_state, number of tasks)
Change = tuple[int, str, str | None, str, int]


def record(changes: Iterable[Change]) -> None:
    from recovery.models import TaskCountDelta

    sums: dict[tuple[int, str, str], int] = defaultdict(int)
    for run_id, partition, old, new, n in changes:
        if old == new or n == 0:
            continue
        if old is not None:
            sums[(run_id, partition, old)] -= n
        sums[(run_id, partition, new)] += n
    rows = [
        TaskCountDelta(run_id=run_id, partition=partition, state=state, delta=delta)
        for (run_id, partition, state), delta in sums.items()
        if delta
    ]
    if rows:
        TaskCountDelta.objects.bulk_create(rows)


def by_partition(run_id: int) -> dict[str, dict[str, int]]:
    """{partition: {state: count}} for one run (zero counts left out)."""
    from recovery.models import TaskCountDelta

    grid: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        TaskCountDelta.objects.filter(run_id=run_id)
        .values("partition", "state")
        .annotate(n=Sum("delta"))
    )
    for row in rows:
        if row["n"]:
            grid[row["partition"]][row["state"]] = row["n"]
    return dict(grid)


def by_state(run_id: int) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for states in by_partition(run_id).values():
        for state, n in states.items():
            totals[state] += n
    return dict(totals)


def compact(run_id: int) -> int:
    """Fold a run's delta rows into one row per (partition, state); returns rows removed."""
    from recovery.models import TaskCountDelta

    with transaction.atomic():
        if connection.vendor == "postgresql":
            # DELETE ... RETURNING reads and removes the same rows in one statement, so a delta
            # committed concurrently is either folded here or left for next time, never lost.
            with connection.cursor() as cursor:
                cursor.execute(
                    "DELETE FROM recovery_taskcountdelta WHERE run_id = %s "
                    "RETURNING partition, state, delta",
                    [run_id],
                )
                removed = cursor.fetchall()
        else:
            # SQLite: the IMMEDIATE transaction already holds the only write lock.
            removed = list(
                TaskCountDelta.objects.filter(run_id=run_id).values_list(
                    "partition", "state", "delta"
                )
            )
            TaskCountDelta.objects.filter(run_id=run_id).delete()
        sums: dict[tuple[str, str], int] = defaultdict(int)
        for partition, state, delta in removed:
            sums[(partition, state)] += delta
        TaskCountDelta.objects.bulk_create(
            TaskCountDelta(run_id=run_id, partition=p, state=s, delta=d)
            for (p, s), d in sums.items()
            if d
        )
    return len(removed)


def rebuild(run_id: int) -> None:
    """Recount a run's counters from its tasks (maintenance; blocks task writes meanwhile)."""
    from recovery.models import Task, TaskCountDelta

    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("LOCK TABLE recovery_task IN SHARE MODE")
        TaskCountDelta.objects.filter(run_id=run_id).delete()
        rows = (
            Task.objects.filter(run_id=run_id)
            .values("partition", "state")
            .annotate(n=Count("pk"))
            .order_by()
        )
        TaskCountDelta.objects.bulk_create(
            TaskCountDelta(run_id=run_id, partition=r["partition"], state=r["state"], delta=r["n"])
            for r in rows
        )
