"""Inventory shortfall: a listing states more items than its walk found (issue 30).

A listing saying "120 products" that lists 100 passed coverage 1.000: coverage counts the
tasks a run has, and the 20 items never became tasks. Each listing walk whose pages show a
total records it against the items it found (ListingTotal, recovery.fetch.listing_totals);
here the run's walks are summed:

- `shortfall(run_id)`: what the run page shows whenever a walk found fewer items than its
  listing states, with both numbers (GLOSSARY-style words in `Shortfall.summary`);
- the rule kind `inventory_shortfall` (`max_share`, default 0.0), checked by
  recovery.intake.spec_shortfall: the missing share, sum(stated - found where positive) /
  sum(stated) over the run's walks, must be at most `max_share`. A run whose listings state
  no total passes, saying so. Its run-level ValidationResult decides acceptance like every
  rule's (Accept quotes `detail.summary`). `judge(run, rules)` is called by
  recovery.quality.validation after its write transaction, as the window rules are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery.models import ListingTotal, Run, ValidationResult

KINDS = ("inventory_shortfall",)
SHOWN = 10  # walks listed on the run page, those missing most first


@dataclass
class Shortfall:
    """The run's walks with a stated total, summed."""

    walks: int = 0
    stated: int = 0
    found: int = 0  # found, counted up to each walk's stated total
    missing: int = 0
    worst: list[ListingTotal] = field(default_factory=list)  # walks short of items, worst first

    @property
    def share(self) -> float:
        return self.missing / self.stated if self.stated else 0.0

    @property
    def summary(self) -> str:
        if not self.walks:
            return "no listing stated a total"
        return (
            f"listings state {self.stated:,} items, {self.found:,} found "
            f"({self.missing:,} missing, {self.share:.1%})"
        )


def shortfall(run_id: int) -> Shortfall:
    """The run's listing totals (one row per walk: bounded by the run's listings)."""
    out = Shortfall()
    short: list[ListingTotal] = []
    for row in ListingTotal.objects.filter(run_id=run_id).order_by("pk"):
        out.walks += 1
        out.stated += row.stated
        out.found += min(row.found, row.stated)
        out.missing += row.missing
        if row.missing:
            short.append(row)
    out.worst = sorted(short, key=lambda r: (-r.missing, r.url))[:SHOWN]
    return out


def judge(run: Run, rules: list[dict[str, Any]]) -> list[str]:
    """Evaluate and store the run's inventory_shortfall rules; the failing ones, in words."""
    gates = [r for r in rules if r.get("kind") in KINDS]
    if not gates:
        return []
    figures = shortfall(run.pk)
    now = timezone.now()
    failures = []
    results = []
    for gate in gates:
        limit = float(gate.get("max_share", 0.0))
        passed = figures.share <= limit
        summary = figures.summary
        if figures.walks:
            summary += f" — max share {limit:.1%}"
        detail = {
            "summary": summary,
            "stated": figures.stated,
            "found": figures.found,
            "missing": figures.missing,
            "walks": figures.walks,
        }
        results.append(
            ValidationResult(
                run=run,
                rule=gate["name"],
                partition="",
                passed=passed,
                value=figures.share,
                threshold=limit,
                detail=detail,
                evaluated_at=now,
            )
        )
        if not passed:
            failures.append(f"{gate['name']}: {summary}")
    with transaction.atomic():
        ValidationResult.upsert(run, results, now)
    return failures
