"""Read-only data for the run pages' chart and error groups, bounded however big the run is.

The run figures themselves (coverage, throughput, ETA, ...) are defined in recovery.figures.
The chart reads recent attempts as a range of the (run, finished_at) index; error-class groups
read at most SAMPLE_CAP quarantined tasks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from recovery.models import Attempt, Task

SAMPLE_CAP = 10_000
CHART_RANGES = {"15m": 15, "1h": 60, "6h": 360}
ERROR_OUTCOMES = ("retry", "quarantined", "dead", "lost_lease", "unknown")


def chart_buckets(run_id: int, minutes: int) -> list[tuple[datetime, int, int]]:
    """(minute, committed, errors) for the `minutes` before the run's latest attempt."""
    latest = (
        Attempt.objects.filter(run_id=run_id, finished_at__isnull=False)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if latest is None:
        return []
    end = min(latest, timezone.now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=minutes)
    rows = (
        Attempt.objects.filter(run_id=run_id, finished_at__gte=start, finished_at__lt=end)
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    committed: dict[datetime, int] = defaultdict(int)
    errors: dict[datetime, int] = defaultdict(int)
    for row in rows:
        if row["outcome"] == Attempt.Outcome.COMMITTED:
            committed[row["minute"]] += row["n"]
        elif row["outcome"] in ERROR_OUTCOMES:
            errors[row["minute"]] += row["n"]
    buckets = []
    for i in range(minutes):
        minute = start + timedelta(minutes=i)
        buckets.append((minute, committed.get(minute, 0), errors.get(minute, 0)))
    return buckets


@dataclass
class ErrorGroup:
    error_class: str
    tasks: int = 0
    partitions: dict[str, int] = field(default_factory=dict)
    sample_task_id: int | None = None
    sample_attempt: Attempt | None = None


def error_groups(run_id: int, state: str) -> tuple[list[ErrorGroup], bool]:
    """Tasks in `state` grouped by error class and partition, from at most SAMPLE_CAP tasks.

    Returns (groups, capped). The (run, state, id) index yields the first SAMPLE_CAP ids; exact
    totals per partition are on the page from the counters.
    """
    # Aggregate over the capped range itself (a derived table with LIMIT), so the database
    # never joins back to the whole task table. ORDER BY id makes the sample the first ids and
    # makes the index the plan: without it PostgreSQL may pick a sequential scan "until 10,001
    # rows match" (seen at 1,000,000 tasks), which reads every earlier run's rows first.
    q = connection.ops.quote_name
    table, err, part = q(Task._meta.db_table), q("last_error_class"), q("partition")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {err}, {part}, COUNT(*), MIN(id) FROM ("
            f"SELECT id, {err}, {part} FROM {table} "
            "WHERE run_id = %s AND state = %s ORDER BY id LIMIT %s) capped "
            f"GROUP BY {err}, {part}",
            [run_id, state, SAMPLE_CAP + 1],
        )
        rows = [
            {"last_error_class": e, "partition": p, "n": n, "sample": s}
            for e, p, n, s in cursor.fetchall()
        ]
    capped = sum(r["n"] for r in rows) > SAMPLE_CAP
    groups: dict[str, ErrorGroup] = {}
    for row in rows:
        group = groups.setdefault(row["last_error_class"], ErrorGroup(row["last_error_class"]))
        group.tasks += row["n"]
        group.partitions[row["partition"]] = row["n"]
        if group.sample_task_id is None or row["sample"] < group.sample_task_id:
            group.sample_task_id = row["sample"]
    ordered = sorted(groups.values(), key=lambda g: (-g.tasks, g.error_class))[:50]
    samples = {g.sample_task_id for g in ordered}
    latest: dict[int, Attempt] = {}
    for attempt in Attempt.objects.filter(task_id__in=samples).order_by("task_id", "started_at"):
        latest[attempt.task_id] = attempt  # the last one per task wins
    for group in ordered:
        group.sample_attempt = latest.get(group.sample_task_id)
        group.partitions = dict(sorted(group.partitions.items(), key=lambda kv: -kv[1])[:20])
    return ordered, capped
