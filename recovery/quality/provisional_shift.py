"""Early warning for `value_shift` rules while a run collects (issue 28: window-over-window
gates "usable in provisional checks while the run collects").

A window whose prices all doubled is refused when it becomes a candidate
(recovery.quality.window_gates). That can be hours after the first pages showed it. So each
`value_shift` rule is also applied to a sample while the run collects:

- the sample is the field's numbers in the run's observations in commit order (observation
  id), read incrementally and capped at SAMPLE_CAP observations, numbers read as the rule reads
  them (recovery.verdicts.number); every observation counts, since none is judged yet;
- the previous accepted window's figures (median and the rule's quantile, of its accepted
  rows: window_sql.value_figures) are read once, when the sample starts;
- once the sample holds MIN_SAMPLE numbers, its median and quantile are compared with them as
  the rule compares a candidate's (window_gates.value_shift_result): above `max_change`, the
  run is flagged, with the figures in words; the flag is written to the audit log and the log
  once, and shown on the run page while the run collects.

A flag is a warning, not a decision: nothing is held and the run keeps collecting; the rule
itself is evaluated on the candidate's accepted rows. The first window of a dataset has nothing
to compare with and is never flagged. A rule is settled once flagged, once its sample is
complete, or when there is no previous window.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery import audit
from recovery.models import Observation, Run, ShiftSample
from recovery.ops import logs
from recovery.quality import window_gates, window_sql
from recovery.states.choices import RunState
from recovery.verdicts import number

log = logging.getLogger(__name__)

MIN_SAMPLE = 30  # numbers before a sample is judged
SAMPLE_CAP = 1000  # observations read at most


def shift_rules(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [r for r in (spec or {}).get("rules", []) if r.get("kind") == "value_shift"]


def check_run(run_id: int) -> list[str]:
    """Read the new observations of each unsettled rule's sample; the rules flagged now."""
    run = Run.objects.select_related("dataset").filter(pk=run_id).first()
    if run is None or run.acceptance_state != RunState.COLLECTING:
        return []
    rules = shift_rules(run.dataset.spec)
    if not rules:
        return []
    _start(run, rules)
    flagged = []
    unsettled = ShiftSample.objects.filter(
        run=run, flagged_at=None, read__lt=SAMPLE_CAP, rule__in=[r["name"] for r in rules]
    ).exclude(previous__isnull=True)
    by_name = {r["name"]: r for r in rules}
    for sample in unsettled:
        if _sample(run, sample, by_name[sample.rule]):
            flagged.append(sample.rule)
    return flagged


def _start(run: Run, rules: list[dict[str, Any]]) -> None:
    """A sample row per rule, with the previous window's figures (None: nothing to compare)."""
    have = set(ShiftSample.objects.filter(run=run).values_list("rule", flat=True))
    missing = [r for r in rules if r["name"] not in have]
    if not missing:
        return
    earlier = window_gates.previous_window(run)
    rows = []
    for rule in missing:
        previous = None
        if earlier is not None:
            then = window_sql.value_figures(earlier.pk, rule["field"], rule["quantile"])
            previous = {
                "window": earlier.window,
                "run": earlier.pk,
                "n": then.n,
                "median": then.median,
                "quantile": then.quantile,
            }
        rows.append(ShiftSample(run=run, rule=rule["name"], previous=previous))
    ShiftSample.objects.bulk_create(rows, ignore_conflicts=True)


def _sample(run: Run, sample: ShiftSample, rule: dict[str, Any]) -> bool:
    new = list(
        Observation.objects.filter(run=run, pk__gt=sample.last_id)
        .order_by("pk")
        .values_list("pk", "payload")[: SAMPLE_CAP - sample.read]
    )
    if not new:
        return False
    values = list(sample.values)
    for _pk, payload in new:
        value = number(payload.get(rule["field"])) if isinstance(payload, dict) else None
        if value is not None and math.isfinite(value):
            values.append(value)
    fields: dict[str, Any] = {
        "values": values,
        "last_id": new[-1][0],
        "read": sample.read + len(new),
    }
    reason = _verdict(rule, sample.previous or {}, values, fields["read"])
    if reason:
        fields.update(reason=reason, flagged_at=timezone.now())
    # Guarded on the watermark: two processes sampling at once read each observation once.
    moved = ShiftSample.objects.filter(
        pk=sample.pk, last_id=sample.last_id, flagged_at=None
    ).update(**fields)
    if not (moved and reason):
        return False
    audit.record("system", "provisional_shift", run, reason, rule=rule["name"], sample=len(values))
    dataset = run.dataset.name
    transaction.on_commit(
        lambda: logs.event(
            log,
            "run_flagged",
            "run %s (%s): rule %s flagged provisionally: %s",
            run.pk,
            dataset,
            rule["name"],
            reason,
            run=run.pk,
            dataset=dataset,
            rule=rule["name"],
        )
    )
    return True


def _verdict(rule: dict[str, Any], previous: dict[str, Any], values: list[float], read: int) -> str:
    """The warning in words, or "" (too few numbers yet, or within the rule)."""
    if len(values) < MIN_SAMPLE:
        return ""
    ordered = sorted(values)
    now = window_sql.ValueFigures(
        len(ordered),
        window_sql.percentile_cont(ordered, 0.5),
        window_sql.percentile_cont(ordered, rule["quantile"]),
    )
    then = window_sql.ValueFigures(previous["n"], previous["median"], previous["quantile"])
    seen = {"window": previous["window"], "run": previous["run"]}
    result = window_gates.value_shift_result(rule, then, now, seen)
    if result.passed:
        return ""
    summary = result.detail["summary"].replace("this window:", f"the first {read} observations:")
    return f"rule {rule['name']}: {summary}"


def shown(run: Run) -> list[ShiftSample]:
    """The run's rules flagged while it collects for the first time after the flag."""
    if run.acceptance_state != RunState.COLLECTING:
        return []
    rows = ShiftSample.objects.filter(run=run).exclude(flagged_at=None).order_by("rule")
    return [
        r
        for r in rows
        if r.flagged_at is not None
        and (run.candidate_at is None or r.flagged_at > run.candidate_at)
    ]


def due() -> bool:
    """True when a collecting run has a value_shift rule whose sample is not settled."""
    collecting = Run.objects.filter(acceptance_state=RunState.COLLECTING).select_related("dataset")
    for run in collecting:
        names = [r["name"] for r in shift_rules(run.dataset.spec)]
        if not names:
            continue
        have = ShiftSample.objects.filter(run=run, rule__in=names)
        if have.count() < len(names):
            return True
        open_samples = have.filter(flagged_at=None, read__lt=SAMPLE_CAP, previous__isnull=False)
        if open_samples.filter(last_id__lt=_newest(run)).exists():
            return True
    return False


def _newest(run: Run) -> int:
    newest = Observation.objects.filter(run=run).order_by("-pk").values_list("pk", flat=True)
    return newest.first() or 0
