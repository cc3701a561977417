"""Read-only figures for the run pages, each one bounded however big the run is.

Task counts come from recovery.counters (a few summed rows per run, never a COUNT(*) over
tasks); rates and the chart read recent attempts as a range of the (run, finished_at) index;
error-class groups read at most SAMPLE_CAP quarantined tasks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from recovery.models import Attempt, RemoteJob, Task, TaskCountDelta
from recovery.states.task import TERMINAL, TaskState

RATE_WINDOW = timedelta(minutes=10)
SAMPLE_CAP = 10_000
CHART_RANGES = {"15m": 15, "1h": 60, "6h": 360}
ERROR_OUTCOMES = ("retry", "quarantined", "dead", "lost_lease", "unknown")
SETTLED_OUTCOMES = ("committed", "gone", "quarantined", "dead")


@dataclass
class RunSummary:
    counts: dict[str, int] = field(default_factory=dict)
    total: int = 0
    settled_per_minute: float = 0.0
    credits: int = 0

    @property
    def committed(self) -> int:
        return self.counts.get(TaskState.COMMITTED, 0)

    @property
    def remaining(self) -> int:
        return sum(n for s, n in self.counts.items() if s not in TERMINAL)

    @property
    def coverage(self) -> float:
        return 100.0 * self.committed / self.total if self.total else 0.0

    @property
    def done(self) -> float:
        settled = sum(n for s, n in self.counts.items() if s in TERMINAL)
        return 100.0 * settled / self.total if self.total else 0.0

    @property
    def eta_minutes(self) -> float | None:
        if not self.remaining:
            return 0.0
        if self.settled_per_minute <= 0:
            return None
        return self.remaining / self.settled_per_minute


def summaries(runs) -> dict[int, RunSummary]:
    """Counts, rate and credits for a page of runs: three grouped queries in all."""
    ids = [run.pk for run in runs]
    result = {run.pk: RunSummary(total=run.task_total) for run in runs}
    counts = (
        TaskCountDelta.objects.filter(run_id__in=ids)
        .values("run_id", "state")
        .annotate(n=Sum("delta"))
        .order_by()
    )
    for row in counts:
        if row["n"]:
            result[row["run_id"]].counts[row["state"]] = row["n"]
    since = timezone.now() - RATE_WINDOW
    rates = (
        Attempt.objects.filter(run_id__in=ids, finished_at__gte=since, outcome__in=SETTLED_OUTCOMES)
        .values("run_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for row in rates:
        result[row["run_id"]].settled_per_minute = row["n"] / (RATE_WINDOW.total_seconds() / 60)
    credits = (
        RemoteJob.objects.filter(run_id__in=ids)
        .values("run_id")
        .annotate(n=Sum("credits_used"))
        .order_by()
    )
    for row in credits:
        result[row["run_id"]].credits = row["n"] or 0
    for summary in result.values():
        summary.total = max(summary.total, sum(summary.counts.values()))
    return result


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

    Returns (groups, capped). The (run, state) index yields the first SAMPLE_CAP ids; exact
    totals per partition are on the page from the counters.
    """
    # Aggregate over the capped range itself (a derived table with LIMIT), so the database
    # never joins back to the whole task table.
    q = connection.ops.quote_name
    table, err, part = q(Task._meta.db_table), q("last_error_class"), q("partition")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {err}, {part}, COUNT(*), MIN(id) FROM ("
            f"SELECT id, {err}, {part} FROM {table} "
            "WHERE run_id = %s AND state = %s LIMIT %s) capped "
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
