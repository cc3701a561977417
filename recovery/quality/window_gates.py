"""Rules that compare windows: a candidate against its dataset's previous accepted window.

A run can pass every rule on its own rows and still not be what data staff expect: a third of
the catalogue gone (a category page stopped listing products), or every price doubled (the
site now shows cents). Three rule kinds compare the run with the **previous accepted window**:
of the dataset's accepted or published runs, the one whose window comes last before this
run's (windows ordered as text, byte by byte: name them so they sort in time, as the
schedules' `%Y-%m-%d` and `%G-W%V` do; a backfilled window is compared with the window before
it, not with the newest).

- `entity_count_change` (`max_drop`, `max_rise`): accepted entities now against then; fails
  when the drop (then - now) / then is above `max_drop`, or the rise (now - then) / then is
  above `max_rise`.
- `disappeared_entities` (`max_share`): the share of the previous window's accepted entities
  that are not accepted in this one; fails above `max_share`.
- `value_shift` (`field`, `max_change`, `quantile`): the median and the `quantile` of the
  field's numbers now against then; fails when either moved by more than `max_change` of its
  previous size ((now - then) / |then|); a previous figure of 0 tolerates only 0.

"Accepted" is what an export carries: valid rows outside quarantined partitions, this run's
as its evaluation has just decided them (recovery.quality.window_sql reads them). The first
window of a dataset passes with the reason stated, "no previous accepted window". Each result
is stored in ValidationResult like every rule's (partition "" for the run; the two entity rules
also per partition, informative, and what `rerun --rule` selects), with `detail.summary` in
words the run page shows and Accept quotes when it refuses:
"previous window 2026-11-30: 1,204 entities; this window: 802 (-33%) — max drop 20%" (with
a minus sign, U+2212, rather than the hyphen written here).
The run-level result alone decides acceptance, as for every rule.

Evaluated after the evaluation's write transaction (`judge`, called by
recovery.quality.validation): the reads span two runs' rows, and on SQLite a long read inside
a write transaction would stall every worker's commit; the results are stored in a short
transaction of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery.models import Run, ValidationResult
from recovery.quality import window_sql
from recovery.states.run import AVAILABLE

KINDS = ("entity_count_change", "disappeared_entities", "value_shift")
NO_PREVIOUS = "no previous accepted window"
MINUS = "\u2212"  # a minus sign, as typeset figures have it (not the hyphen)


@dataclass(slots=True)
class GateResult:
    """One rule's result for the run (partition "") or one partition: a ValidationResult."""

    rule: str
    partition: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: dict[str, Any] = field(default_factory=dict)


def previous_window(run: Run) -> Run | None:
    """The dataset's accepted or published run whose window comes last before this run's."""
    earlier = [
        (window, pk)
        for pk, window in Run.objects.filter(
            dataset_id=run.dataset_id, acceptance_state__in=AVAILABLE
        )
        .exclude(pk=run.pk)
        .values_list("pk", "window")
        if window < run.window
    ]
    if not earlier:
        return None
    return Run.objects.get(pk=max(earlier)[1])


def gate_rules(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [r for r in (spec or {}).get("rules", []) if r.get("kind") in KINDS]


def judge(run: Run, rules: list[dict[str, Any]]) -> list[str]:
    """Evaluate and store the run's window rules; the failing run-level ones, in words."""
    gates = [r for r in rules if r.get("kind") in KINDS]
    if not gates:
        return []
    results = results_for(run, gates)
    _store(run, gates, results)
    return [f"{r.rule}: {r.detail['summary']}" for r in results if not r.partition and not r.passed]


def results_for(run: Run, gates: list[dict[str, Any]]) -> list[GateResult]:
    """Every result of these rules for the run (nothing stored)."""
    previous = previous_window(run)
    if previous is None:
        return [
            GateResult(g["name"], "", True, None, _threshold(g), {"summary": NO_PREVIOUS})
            for g in gates
        ]
    seen = {"window": previous.window, "run": previous.pk}
    counts: dict[int, dict[str, int]] = {}

    def counted(run_id: int) -> dict[str, int]:
        if run_id not in counts:
            counts[run_id] = window_sql.entity_counts(run_id)
        return counts[run_id]

    results: list[GateResult] = []
    for gate in gates:
        if gate["kind"] == "entity_count_change":
            results += _count_change(gate, counted(previous.pk), counted(run.pk), seen)
        elif gate["kind"] == "disappeared_entities":
            gone = window_sql.disappeared(previous.pk, run.pk)
            results += _disappeared(gate, counted(previous.pk), gone, seen)
        else:
            q = gate["quantile"]
            then = window_sql.value_figures(previous.pk, gate["field"], q)
            now = window_sql.value_figures(run.pk, gate["field"], q)
            results.append(value_shift_result(gate, then, now, seen))
    return results


def _threshold(gate: dict[str, Any]) -> float | None:
    for key in ("max_drop", "max_share", "max_change", "max_rise"):
        if key in gate:
            return float(gate[key])
    return None


# --- words ---------------------------------------------------------------------------------


def _n(count: int) -> str:
    return f"{count:,}"


def _pct(share: float, signed: bool = False) -> str:
    """33% (signed: +33%, or a minus sign, U+2212, and 33%); a share under 1% but not 0 keeps
    one decimal: 0.4%."""
    size = abs(share) * 100
    text = f"{size:.1f}%" if 0 < size < 1 else f"{size:.0f}%"
    if not signed or size == 0:
        return text
    return (MINUS if share < 0 else "+") + text


def _figure(value: float | None) -> str:
    return "none" if value is None else f"{value:,.2f}"


# --- one function per kind -----------------------------------------------------------------


def _count_change(
    gate: dict[str, Any], then: dict[str, int], now: dict[str, int], seen: dict[str, Any]
) -> list[GateResult]:
    limits = []
    if "max_drop" in gate:
        limits.append(f"max drop {_pct(gate['max_drop'])}")
    if "max_rise" in gate:
        limits.append(f"max rise {_pct(gate['max_rise'])}")
    limit_words = ", ".join(limits)

    def judged(partition: str, before: int, after: int) -> GateResult:
        detail: dict[str, Any] = {**seen, "previous": before, "entities": after}
        where = f"previous window {seen['window']}"
        if before == 0:
            detail["summary"] = (
                f"{where}: no accepted entities{' in this partition' if partition else ''}; "
                f"this window: {_n(after)}"
            )
            return GateResult(gate["name"], partition, True, None, _threshold(gate), detail)
        change = (after - before) / before
        # The value shown is the move judged: the drop against max_drop, a rise against
        # max_rise (no change is shown against max_drop when there is one).
        if change < 0 or "max_rise" not in gate:
            value, threshold = max(-change, 0.0), gate.get("max_drop")
        else:
            value, threshold = change, gate["max_rise"]
        passed = not (
            ("max_drop" in gate and -change > gate["max_drop"])
            or ("max_rise" in gate and change > gate["max_rise"])
        )
        detail["change"] = change
        detail["summary"] = (
            f"{where}: {_n(before)} entities; this window: {_n(after)} "
            f"({_pct(change, signed=True)}) — {limit_words}"
        )
        return GateResult(gate["name"], partition, passed, value, threshold, detail)

    results = [judged("", sum(then.values()), sum(now.values()))]
    for partition in sorted(set(then) | set(now)):
        results.append(judged(partition, then.get(partition, 0), now.get(partition, 0)))
    return results


def _disappeared(
    gate: dict[str, Any], then: dict[str, int], gone: dict[str, int], seen: dict[str, Any]
) -> list[GateResult]:
    limit = gate["max_share"]

    def judged(partition: str, before: int, missing: int) -> GateResult:
        detail: dict[str, Any] = {**seen, "previous": before, "disappeared": missing}
        where = f"previous window {seen['window']}"
        if before == 0:
            detail["summary"] = f"{where}: no accepted entities"
            return GateResult(gate["name"], partition, True, None, limit, detail)
        share = missing / before
        detail["summary"] = (
            f"{where}: {_n(before)} entities; {_n(missing)} of them ({_pct(share)}) are not in "
            f"this window — max {_pct(limit)}"
        )
        return GateResult(gate["name"], partition, share <= limit, share, limit, detail)

    results = [judged("", sum(then.values()), sum(gone.values()))]
    for partition in sorted(then):
        results.append(judged(partition, then[partition], gone.get(partition, 0)))
    return results


def relative_change(before: float, after: float) -> float | None:
    """(after - before) / |before|; None when unbounded (from 0 to anything else, or beyond
    what a float holds)."""
    if before == 0:
        return 0.0 if after == 0 else None
    change = (after - before) / abs(before)
    return change if math.isfinite(change) else None


def value_shift_result(
    gate: dict[str, Any],
    then: window_sql.ValueFigures,
    now: window_sql.ValueFigures,
    seen: dict[str, Any],
) -> GateResult:
    """A value_shift rule's result from the two windows' figures (also the early warning's,
    recovery.quality.provisional_shift)."""
    name, limit, q = gate["name"], gate["max_change"], gate["quantile"]
    label = f"{q * 100:g}th percentile"
    detail: dict[str, Any] = {
        **seen,
        "field": gate["field"],
        "previous_values": then.n,
        "values": now.n,
        "previous_median": then.median,
        "median": now.median,
        "previous_quantile": then.quantile,
        "quantile": now.quantile,
    }
    where = f"{gate['field']}, previous window {seen['window']}"
    if then.median is None or then.quantile is None:
        detail["summary"] = f"{where}: no numeric values"
        return GateResult(name, "", True, None, limit, detail)
    before = (
        f"{where}: median {_figure(then.median)}, {label} {_figure(then.quantile)} "
        f"({_n(then.n)} values)"
    )
    if now.median is None or now.quantile is None:
        detail["summary"] = f"{before}; this window: no numeric values — max change {_pct(limit)}"
        return GateResult(name, "", False, None, limit, detail)
    changes = [
        relative_change(then.median, now.median),
        relative_change(then.quantile, now.quantile),
    ]
    detail["median_change"], detail["quantile_change"] = changes

    def moved(change: float | None) -> str:
        return "from 0" if change is None else _pct(change, signed=True)

    detail["summary"] = (
        f"{before}; this window: median {_figure(now.median)} ({moved(changes[0])}), "
        f"{label} {_figure(now.quantile)} ({moved(changes[1])}) ({_n(now.n)} values) "
        f"— max change {_pct(limit)}"
    )
    if any(c is None for c in changes):
        return GateResult(name, "", False, None, limit, detail)
    worst = max(abs(c) for c in changes if c is not None)
    return GateResult(name, "", worst <= limit, worst, limit, detail)


# --- storage -------------------------------------------------------------------------------


def _store(run: Run, gates: list[dict[str, Any]], results: list[GateResult]) -> None:
    now = timezone.now()
    names = [g["name"] for g in gates]
    with transaction.atomic():
        ValidationResult.upsert(run, results, now)
        # A partition an earlier evaluation judged and this one did not (another previous
        # window since, or none) keeps no stale result.
        kept = {(r.rule, r.partition) for r in results}
        stale = [
            pk
            for pk, rule, partition in ValidationResult.objects.filter(
                run=run, rule__in=names
            ).values_list("pk", "rule", "partition")
            if (rule, partition) not in kept
        ]
        if stale:
            ValidationResult.objects.filter(pk__in=stale).delete()
