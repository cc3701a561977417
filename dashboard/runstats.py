"""Read-only data for the run page's chart, bounded however big the run is.

The run figures themselves (coverage, throughput, ETA, ...) are defined in recovery.quality.figures,
the quarantine page's error groups in recovery.quality.quarantine. The chart reads recent attempts
as a range of the (run, finished_at) index.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.utils import timezone

from recovery.models import Attempt

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
