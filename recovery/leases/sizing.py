"""Lease lengths from measured task times (seed 002: "Choose the lease duration from measured
task times").

A task's duration is its Attempt's finished_at - started_at, which every commit already writes:
measuring adds no write to the hot path. `measure(dataset_id)` reads a dataset's most recent
SAMPLE attempts that executed the page (committed, retry, quarantined, gone, dead: not a lost
lease's takeover record, a deferral or a remote submission) and gives p50/p95/p99 per page type
and overall, and the lease the overall p99 implies: p99 x MARGIN, between MIN_LEASE and
MAX_LEASE seconds. Below MIN_ATTEMPTS attempts it implies nothing (None) and the default lease
holds.

A dataset whose spec says `lease_seconds = "auto"` (Dataset.lease_auto) has its implied lease
written to Dataset.lease_auto_seconds by `refresh()`, which the claim reads as
COALESCE(d.lease_seconds, d.lease_auto_seconds, SALVAGE_LEASE_SECONDS): the claim statement
gains no query. `claim` calls `refresh_due()`, which refreshes at most once per REFRESH_SECONDS
per process, and writes a dataset row only when its implied lease changed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from recovery.models import Attempt, Dataset, Run

# The bound on the query: a dataset's latest attempts, read through attempt_run_finished_idx.
SAMPLE = 5000
# ... from at most this many of its newest runs.
RUNS = 50
# Below this many measured attempts the percentiles are noise: the default lease holds.
MIN_ATTEMPTS = 50
# A lease must outlast the slowest page it will meet: p99 x 3 leaves room for the 1 in 100
# slower than p99 (a heartbeat extends a lease still held, so a long one is only extended).
MARGIN = 3.0
MIN_LEASE = 30
MAX_LEASE = 3600
REFRESH_SECONDS = 60.0

# The outcomes whose attempt timed one execution of the page (a lost lease's takeover record
# has started_at = finished_at; a deferral did not fetch; a submission is a remote job's).
TIMED_OUTCOMES = (
    Attempt.Outcome.COMMITTED,
    Attempt.Outcome.RETRY,
    Attempt.Outcome.QUARANTINED,
    Attempt.Outcome.GONE,
    Attempt.Outcome.DEAD,
)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Task durations (seconds) of one page type, or of all ("")."""

    page_type: str
    attempts: int
    p50: float
    p95: float
    p99: float


@dataclass(frozen=True, slots=True)
class LeaseSizing:
    """What a dataset's recent attempts say about its lease."""

    overall: Percentiles | None  # None: no timed attempt yet
    page_types: list[Percentiles] = field(default_factory=list)
    implied: int | None = None  # None: fewer than MIN_ATTEMPTS attempts

    def as_dict(self) -> dict[str, Any]:
        def row(p: Percentiles) -> dict[str, Any]:
            return {
                "page_type": p.page_type,
                "attempts": p.attempts,
                "p50": round(p.p50, 3),
                "p95": round(p.p95, 3),
                "p99": round(p.p99, 3),
            }

        return {
            "overall": row(self.overall) if self.overall else None,
            "page_types": [row(p) for p in self.page_types],
            "implied_lease_seconds": self.implied,
            "min_attempts": MIN_ATTEMPTS,
            "margin": MARGIN,
        }


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100) of an ascending list."""
    if not ordered:
        raise ValueError("no values")
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def percentiles(page_type: str, durations: list[float]) -> Percentiles:
    ordered = sorted(durations)
    return Percentiles(
        page_type,
        len(ordered),
        percentile(ordered, 50),
        percentile(ordered, 95),
        percentile(ordered, 99),
    )


def implied_lease(p99: float, attempts: int) -> int | None:
    """p99 x MARGIN, bounded to [MIN_LEASE, MAX_LEASE]; None below MIN_ATTEMPTS attempts."""
    if attempts < MIN_ATTEMPTS:
        return None
    return int(min(max(math.ceil(p99 * MARGIN), MIN_LEASE), MAX_LEASE))


def measure(dataset_id: int, sample: int = SAMPLE) -> LeaseSizing:
    """The dataset's latest `sample` timed attempts, as percentiles and the lease they imply.

    Read run by run, newest run first, each an index range of attempt_run_finished_idx
    (run, finished_at DESC) limited to what the sample still lacks: the query never sorts a
    dataset's whole attempt history.
    """
    rows: list[tuple[str, datetime, datetime | None]] = []
    run_ids = Run.objects.filter(dataset_id=dataset_id).order_by("-created_at", "-pk")
    for run_id in run_ids.values_list("pk", flat=True)[:RUNS]:
        if len(rows) >= sample:
            break
        rows += (
            Attempt.objects.filter(
                run_id=run_id, outcome__in=TIMED_OUTCOMES, finished_at__isnull=False
            )
            .order_by("-finished_at")
            .values_list("task__page_type", "started_at", "finished_at")[: sample - len(rows)]
        )
    by_type: dict[str, list[float]] = {}
    everything: list[float] = []
    for page_type, started, finished in rows:
        if finished is None:
            continue
        seconds = max((finished - started).total_seconds(), 0.0)
        by_type.setdefault(page_type, []).append(seconds)
        everything.append(seconds)
    if not everything:
        return LeaseSizing(None)
    overall = percentiles("", everything)
    return LeaseSizing(
        overall,
        [percentiles(t, d) for t, d in sorted(by_type.items())],
        implied_lease(overall.p99, overall.attempts),
    )


def refresh() -> int:
    """Write each auto-lease dataset's implied lease; returns how many rows changed."""
    changed = 0
    for dataset_id, current in Dataset.objects.filter(lease_auto=True).values_list(
        "id", "lease_auto_seconds"
    ):
        implied = measure(dataset_id).implied
        if implied != current:
            # Filtered on the value read: two workers refreshing at once write it once.
            # (filter(x=None) is IS NULL.)
            changed += Dataset.objects.filter(id=dataset_id, lease_auto_seconds=current).update(
                lease_auto_seconds=implied
            )
    return changed


_next_refresh = 0.0


def refresh_due(now: float | None = None) -> bool:
    """refresh() when this process last did more than REFRESH_SECONDS ago; True if it ran."""
    global _next_refresh
    now = time.monotonic() if now is None else now
    if now < _next_refresh:
        return False
    _next_refresh = now + REFRESH_SECONDS
    refresh()
    return True


def forget() -> None:
    """The next refresh_due() refreshes (tests; a dataset's spec switched to auto)."""
    global _next_refresh
    _next_refresh = 0.0


class LeaseReport(TypedDict):
    """runstatus --json's `task_times` and the dataset page's figures."""

    overall: dict[str, Any] | None
    page_types: list[dict[str, Any]]
    implied_lease_seconds: int | None
    min_attempts: int
    margin: float
    lease_seconds: int  # the lease a claim gives now
    lease_source: str  # "spec", "auto" (measured), "default" (auto before enough attempts too)


def in_force(dataset: Dataset, default: int) -> tuple[int, str]:
    """The lease a claim gives the dataset's tasks now, and where it comes from."""
    if dataset.lease_seconds:
        return dataset.lease_seconds, "spec"
    if dataset.lease_auto and dataset.lease_auto_seconds:
        return dataset.lease_auto_seconds, "auto"
    return default, "default"


def report(dataset: Dataset, default: int) -> LeaseReport:
    measured = measure(dataset.pk).as_dict()
    seconds, source = in_force(dataset, default)
    return LeaseReport(
        overall=measured["overall"],
        page_types=measured["page_types"],
        implied_lease_seconds=measured["implied_lease_seconds"],
        min_attempts=MIN_ATTEMPTS,
        margin=MARGIN,
        lease_seconds=seconds,
        lease_source=source,
    )


def report_lines(r: LeaseReport) -> list[str]:
    """runstatus's text lines for a LeaseReport."""
    source = {"spec": "the spec's", "auto": "auto: measured", "default": "the default"}
    lines = []
    if r["overall"] is None:
        lines.append("task times: no timed attempt yet")
    for row in [r["overall"], *r["page_types"]] if r["overall"] else []:
        label = f"page type {row['page_type']}" if row["page_type"] else "all page types"
        lines.append(
            f"task times, {label} (last {row['attempts']} attempts): p50 {row['p50']}s, "
            f"p95 {row['p95']}s, p99 {row['p99']}s"
        )
    implied = r["implied_lease_seconds"]
    lines.append(
        (
            f"implied lease {implied}s (p99 x {r['margin']:g}, within {MIN_LEASE}-{MAX_LEASE}s)"
            if implied is not None
            else f"implied lease: none before {r['min_attempts']} attempts"
        )
        + f"; lease in force {r['lease_seconds']}s ({source[r['lease_source']]})"
    )
    return lines
