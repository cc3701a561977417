"""Early (provisional) quarantine: flag a bad partition while its run is still collecting.

The final decision on a partition is made when the run becomes a candidate
(quality.validation). Until then an operator would see a broken retailer only minutes later,
so each `partition_invalid_share` rule is also applied to a sample while the run collects:

- a partition's sample is its observations in commit order (observation id), read
  incrementally and capped at SAMPLE_CAP observations;
- an observation is invalid for the rule exactly as at candidate time: its field is empty or
  fails a value rule (`range`, `pattern`, `enum`) on that field;
- the partition is flagged when the sample has at least MIN_SAMPLE observations and the
  one-sided 95% Wilson lower bound of its invalid share is above the rule's `max`, i.e. the
  share is above the threshold with 95% confidence, not merely on a few unlucky pages.

A flag is a warning, not a decision: observations are not held and tasks keep running. It is
shown on the run and quarantine pages while the run collects for the first time after the flag
(`is_shown`), and written to the audit log once. docs/spec-format.md states the rule.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from recovery import audit, counters
from recovery.models import Observation, Run, RunPartition
from recovery.ops import logs
from recovery.quality import provisional_shift
from recovery.states.choices import RunState
from recovery.verdicts import VALUE_RULE_KINDS
from recovery.verdicts import check_value as _check_value
from recovery.verdicts import empty as _empty

log = logging.getLogger(__name__)

MIN_SAMPLE = 30
SAMPLE_CAP = 1000
Z_95_ONE_SIDED = 1.6449
# How often one process samples the collecting runs (the worker step runs every second).
CHECK_SECONDS = 2.0

_last_check = {"at": 0.0}


def wilson_lower_bound(invalid: int, n: int, z: float = Z_95_ONE_SIDED) -> float:
    """The lower end of the Wilson score interval for a share of invalid/n (0 when n is 0)."""
    if n <= 0:
        return 0.0
    p = invalid / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


@dataclass(frozen=True)
class _Rule:
    name: str
    field: str
    max: float
    checks: tuple[tuple[dict[str, Any], Any], ...]  # value rules on the field, ready to apply

    def invalid(self, payload: dict[str, Any]) -> bool:
        value = payload.get(self.field)
        if _empty(value):
            return True
        return any(not _check_value(rule, value, ready) for rule, ready in self.checks)


def _rules(spec: dict[str, Any]) -> list[_Rule]:
    rules = spec.get("rules", [])
    out = []
    for rule in rules:
        if rule["kind"] != "partition_invalid_share":
            continue
        checks = []
        for value_rule in rules:
            if value_rule["kind"] in VALUE_RULE_KINDS and value_rule["field"] == rule["field"]:
                ready: Any = None
                if value_rule.get("pattern"):
                    ready = re.compile(value_rule["pattern"])
                elif "values" in value_rule:
                    ready = frozenset(str(v) for v in value_rule["values"])
                checks.append((value_rule, ready))
        out.append(_Rule(rule["name"], rule["field"], float(rule["max"]), tuple(checks)))
    return out


def check_due() -> int:
    """Sample every collecting run (throttled per process); returns partitions and value_shift
    rules newly flagged."""
    now = time.monotonic()
    if now - _last_check["at"] < CHECK_SECONDS:
        return 0
    _last_check["at"] = now
    flagged = 0
    for run_id in Run.objects.filter(acceptance_state=RunState.COLLECTING).values_list(
        "pk", flat=True
    ):
        flagged += len(check_run(run_id))
        # The value_shift rules' early warning is run-level (recovery.quality.provisional_shift).
        flagged += len(provisional_shift.check_run(run_id))
    return flagged


def check_run(run_id: int) -> list[str]:
    """Read the new observations of every unsettled partition; flag those over a threshold.

    Returns the partitions flagged by this call. A partition is settled once flagged or once
    its sample is complete (SAMPLE_CAP observations without a flag).
    """
    run = Run.objects.select_related("dataset").filter(pk=run_id).first()
    if run is None or run.acceptance_state != RunState.COLLECTING:
        return []
    rules = _rules(run.dataset.spec or {})
    if not rules:
        return []
    names = [p for p in counters.by_partition(run.pk) if p]
    RunPartition.objects.bulk_create(
        [RunPartition(run=run, name=p) for p in names], ignore_conflicts=True
    )
    flagged = []
    unsettled = RunPartition.objects.filter(
        run=run, provisional_at=None, sample_size__lt=SAMPLE_CAP
    ).exclude(quarantined=True)
    for row in unsettled:
        if _sample(run, row, rules):
            flagged.append(row.name)
    return flagged


def _sample(run: Run, row: RunPartition, rules: list[_Rule]) -> bool:
    new = list(
        Observation.objects.filter(run=run, partition=row.name, pk__gt=row.sample_last_id)
        .order_by("pk")
        .values_list("pk", "payload")[: SAMPLE_CAP - row.sample_size]
    )
    if not new:
        return False
    invalid = dict(row.sample_invalid or {})
    for _pk, payload in new:
        payload = payload if isinstance(payload, dict) else {}
        for rule in rules:
            if rule.invalid(payload):
                invalid[rule.name] = invalid.get(rule.name, 0) + 1
    size = row.sample_size + len(new)
    reasons = []
    for rule in rules:
        bound = wilson_lower_bound(invalid.get(rule.name, 0), size)
        if size >= MIN_SAMPLE and bound > rule.max:
            reasons.append(
                f"rule {rule.name}: {invalid.get(rule.name, 0)} of the first {size} "
                f"observations invalid, share above {bound:.1%} with 95% confidence "
                f"(max {rule.max:.1%})"
            )
    fields: dict[str, Any] = {
        "sample_size": size,
        "sample_invalid": invalid,
        "sample_last_id": new[-1][0],
    }
    if reasons:
        fields.update(provisional_reason="; ".join(reasons), provisional_at=timezone.now())
    # Guarded on the watermark: two processes sampling at once count each observation once.
    moved = RunPartition.objects.filter(
        pk=row.pk, sample_last_id=row.sample_last_id, provisional_at=None
    ).update(**fields)
    if moved and reasons:
        audit.record(
            "system",
            "provisional_quarantine",
            run,
            fields["provisional_reason"],
            partition=row.name,
            sample=size,
        )
        dataset, reason = run.dataset.name, fields["provisional_reason"]
        transaction.on_commit(
            lambda: logs.event(
                log,
                "partition_flagged",
                "run %s (%s): partition %s flagged provisionally: %s",
                run.pk,
                dataset,
                row.name,
                reason,
                run=run.pk,
                dataset=dataset,
                partition=row.name,
            )
        )
        return True
    return False


def is_shown(run: Run, row: RunPartition) -> bool:
    """A flag is shown while the run collects for the first time after it (a later recovery
    batch reopens the run, but the candidate-time decision has superseded the flag)."""
    if row.provisional_at is None or row.quarantined:
        return False
    if run.acceptance_state != RunState.COLLECTING:
        return False
    return run.candidate_at is None or row.provisional_at > run.candidate_at


def shown_flags(run: Run) -> list[RunPartition]:
    """The run's partitions flagged provisionally and still shown, by name."""
    if run.acceptance_state != RunState.COLLECTING:
        return []
    rows = RunPartition.objects.filter(run=run, quarantined=False).exclude(Q(provisional_at=None))
    return sorted((r for r in rows if is_shown(run, r)), key=lambda r: r.name)


def due() -> bool:
    """True when a collecting run has a partition rule and an unsettled partition, or an
    unsettled value_shift sample (cheap: the dispatcher asks this to decide whether to wake
    the acceptance task)."""
    if provisional_shift.due():
        return True
    for run in Run.objects.filter(acceptance_state=RunState.COLLECTING).select_related("dataset"):
        if not _rules(run.dataset.spec or {}):
            continue
        names = {p for p in counters.by_partition(run.pk) if p}
        rows = RunPartition.objects.filter(run=run)
        if len(names) > rows.count():
            return True
        if rows.filter(provisional_at=None, sample_size__lt=SAMPLE_CAP, quarantined=False).exists():
            return True
    return False
