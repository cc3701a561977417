"""Validation rules of a dataset spec (docs/spec-format.md, `[[rules]]`), per run and partition.

What a rule decides:
- Value rules (`range`, `pattern`, `enum`) and required fields say whether one observation is valid.
  An observation that fails one is `invalid` and is left out of the candidate. Each row is
  judged once, by the commit that writes it (quality.verdicts); an evaluation sums the stored
  verdicts and judges again only rows that other rules (or none) judged.
- `partition_invalid_share` holds a whole partition (e.g. one retailer) out of the candidate
  when its share of invalid values of a field is above `max`: the RunPartition is quarantined,
  which makes its observations `held` (recovery.states.row_states). Guarantee 6: held and invalid
  observations are never exported or published.
- `coverage` (valid observations / logical extracting tasks), `required` (share of complete
  observations) and `outcome_ratio` (share of terminal tasks in one outcome) are run-level
  gates: each must reach its `min`.
- A value rule passes at run level when the invalid share among the non-held observations is
  within the tolerance of the partition rule on the same field (its `max`), or zero when the
  field has no partition rule.

Every rule's latest result is stored in ValidationResult for the run (partition "") and for each
partition, so the dashboard shows where a run fails. Validation never changes a task's state: a
quality failure is the dataset's problem, not the execution's (seed 002).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from recovery import counters
from recovery.models import Observation, Run, RunPartition, Task, ValidationResult
from recovery.ops import logs
from recovery.quality import shortfall, validation_sql, window_gates
from recovery.states import row_states
from recovery.states.task import TERMINAL
from recovery.verdicts import Rules

log = logging.getLogger(__name__)

VALID = Observation.Validation.VALID
INVALID = Observation.Validation.INVALID

# RunPartition.quarantine_reason prefix for quarantines made here; only those are lifted by a
# later evaluation (an operator's or the engine's quarantine is left alone).
RULE_REASON_PREFIX = "rule "

_CHUNK = 500


@dataclass
class Evaluation:
    """The outcome of evaluating a run's rules."""

    run_id: int
    passed: bool
    failures: list[str] = field(default_factory=list)  # "rule: value < threshold" lines
    quarantined: list[str] = field(default_factory=list)  # partitions held out
    released: list[str] = field(default_factory=list)  # partitions no longer held
    counts: dict[str, int] = field(default_factory=dict)  # observations by state as shown


@dataclass(slots=True)
class RuleResult:
    """One rule's verdict for the run (partition "") or one partition (a ValidationResult)."""

    rule: str
    partition: str
    passed: bool
    value: float | None
    threshold: float | None
    detail: dict[str, Any] = field(default_factory=dict)


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass
class _Tally:
    total: int = 0
    fails: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # rule -> failures
    field_invalid: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    complete: int = 0
    valid: int = 0  # observations that pass every value rule and have every required field

    def add(self, rules: Rules, bits: int, n: int = 1) -> None:
        """Count `n` observations whose verdict is `bits` (quality.verdicts.Rules.verdict)."""
        self.total += n
        for i, rule in enumerate(rules.value_rules):
            if bits >> i & 1:
                self.fails[rule["name"]] += n
        for k, name in enumerate(rules.watched):
            if bits >> rules.watched_bit(k) & 1:
                self.field_invalid[name] += n
        if not bits >> rules.incomplete_bit & 1:
            self.complete += n
        if not bits & rules.invalid_mask:
            self.valid += n


def extracting_page_types(spec: dict[str, Any]) -> list[str]:
    return [name for name, pt in spec.get("page_types", {}).items() if pt.get("fields")]


def evaluate(run_id: int, *, mark: set[str] | None = None) -> Evaluation:
    """Evaluate a run's rules, store the results, decide partitions' holds.

    `mark` limits which partitions' holds are decided again (a recovery batch re-marks only
    the repaired partitions; guarantee 7 keeps the others as they were), together with every
    partition whose observations changed since its hold was last decided; None re-marks every
    partition. Run-level results always cover the whole run.
    """
    run = Run.objects.select_related("dataset").get(pk=run_id)
    return _evaluate(run, mark)


def _evaluate(run: Run, mark: set[str] | None) -> Evaluation:
    spec = run.dataset.spec or {}
    rules: list[dict[str, Any]] = list(spec.get("rules", []))
    judged_by = Rules.of(spec)
    value_rules = list(judged_by.value_rules)
    partition_rules = [r for r in rules if r["kind"] == "partition_invalid_share"]
    tolerance = {r["field"]: r["max"] for r in partition_rules}

    # The verdicts the commits stored (recovery.verdicts), summed per partition in one read.
    found = validation_sql.stored(run.pk, judged_by.digest)
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    for partition, by_verdict in found.by_verdict.items():
        for bits, n in by_verdict.items():
            tallies[partition].add(judged_by, bits, n)
    # Rows judged by other rules (a spec changed by loaddataset, a worker's spec a moment old)
    # or by none are judged now: in SQL, and by the Python definition where SQL cannot decide.
    in_sql = validation_sql.RowVerdicts(
        connection.vendor, value_rules, dict(judged_by.required), judged_by.watched
    )
    in_python: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    if found.stale:
        again = validation_sql.tally(run.pk, in_sql, stale_for=judged_by.digest)
        for partition, counted in again.tallies.items():
            tally = tallies[partition]
            tally.total += counted.total
            tally.complete += counted.complete
            tally.valid += counted.valid
            for name, n in counted.fails.items():
                tally.fails[name] += n
            for name, n in counted.field_invalid.items():
                tally.field_invalid[name] += n
        for pk, partition, payload, page_type in again.undecided:
            bits = judged_by.verdict(payload, page_type)
            tallies[partition].add(judged_by, bits)
            in_python[partition][bits].append(pk)

    partitions = {row.name: row for row in RunPartition.objects.filter(run=run).order_by("name")}
    held_before = {name for name, row in partitions.items() if row.quarantined}
    if mark is not None:
        # A partition whose rows were added or rewritten since its hold was decided (or that
        # never had one decided) is decided again: its data is new to the rules.
        mark = set(mark) | {
            p
            for p, fingerprint in found.fingerprints.items()
            if p not in partitions
            or (partitions[p].marked_rows, partitions[p].marked_sum) != fingerprint
        }

    def marked(partition: str) -> bool:
        return mark is None or partition in mark

    # The read pass above runs outside any transaction (on SQLite a long write transaction
    # would stall every worker's commit); the writes below are one short transaction.
    with transaction.atomic():
        Run.objects.select_for_update().filter(pk=run.pk).first()
        # Every partition gets its RunPartition row (quarantine flag, triage marks).
        RunPartition.objects.bulk_create(
            [RunPartition(run=run, name=p) for p in tallies], ignore_conflicts=True
        )
        now = timezone.now()
        results: list[RuleResult] = []

        # Partition rules first: they decide which partitions are held out of the candidate.
        # A hold lives on the partition (quality.row_states): no observation row is written.
        held = {p for p in held_before if mark is not None and p not in mark}
        quarantined: list[str] = []
        released: list[str] = []
        rule_holds: dict[str, list[str]] = defaultdict(list)
        for rule in partition_rules:
            results += _partition_invalid_share(rule, tallies, marked, rule_holds)
        for partition in sorted(p for p in tallies if marked(p)):
            if rule_holds.get(partition):
                held.add(partition)
                reason = RULE_REASON_PREFIX + "; ".join(rule_holds[partition])
                row, _ = RunPartition.objects.get_or_create(run=run, name=partition)
                # Guarded on the flag: of two evaluations only the one that moves it logs.
                newly = RunPartition.objects.filter(pk=row.pk, quarantined=False).update(
                    quarantined=True, quarantine_reason=reason
                )
                if not newly and row.quarantine_reason != reason:
                    RunPartition.objects.filter(pk=row.pk).update(quarantine_reason=reason)
                if newly:
                    _log_quarantined(run, partition, reason)
                if partition not in held_before:
                    quarantined.append(partition)
            elif partition in held_before:
                lifted = RunPartition.objects.filter(
                    run=run, name=partition, quarantine_reason__startswith=RULE_REASON_PREFIX
                ).update(quarantined=False, quarantine_reason="")
                if lifted:
                    released.append(partition)
                elif RunPartition.objects.filter(
                    run=run, name=partition, quarantined=True
                ).exists():
                    held.add(partition)  # quarantined by someone else: stays held
                # else: a concurrent evaluation already released it (several workers may
                # finish the same recovery batch at once), so its rows are not held.
        # A partition held before and not re-marked keeps its hold.
        held |= {p for p in held_before if not marked(p)}
        partition_rule_names = {r["name"] for r in partition_rules}
        for res in results:
            if res.rule in partition_rule_names and res.partition == "":
                res.detail = {"held": sorted(held)}

        # The re-marked partitions' rows judged just now get their verdict stored (the SQL
        # decided ones in one UPDATE, the others by their ids), and each re-marked partition
        # its fingerprint: the rows its hold was decided on.
        if found.stale:
            validation_sql.mark(
                run.pk,
                in_sql,
                None if mark is None else {p for p in tallies if marked(p)},
                judged_by.digest,
                {"valid": VALID, "invalid": INVALID},
            )
            for partition, by_bits in in_python.items():
                if not marked(partition):
                    continue
                for bits, ids in by_bits.items():
                    for start in range(0, len(ids), _CHUNK):
                        Observation.objects.filter(pk__in=ids[start : start + _CHUNK]).update(
                            verdict=bits if judged_by.judged_at_commit else None,
                            verdict_rules=judged_by.digest,
                            validation_state=judged_by.state(bits),
                        )
        for partition, (n_rows, checksum) in found.fingerprints.items():
            before = partitions.get(partition)
            if marked(partition) and (
                before is None or (before.marked_rows, before.marked_sum) != (n_rows, checksum)
            ):
                RunPartition.objects.filter(run=run, name=partition).update(
                    marked_rows=n_rows, marked_sum=checksum
                )

        # Run-level aggregates over the non-held partitions.
        live = {p: t for p, t in tallies.items() if p not in held}
        for rule in value_rules:
            results += _value_rule(rule, tallies, live, tolerance.get(rule["field"], 0.0))

        grid = counters.by_partition(run.pk)
        extracting = extracting_page_types(spec)
        all_extracting = set(extracting) >= set(spec.get("page_types", {}))
        if all_extracting:
            tasks_by_partition = {p: sum(s.values()) for p, s in grid.items()}
        else:
            tasks_by_partition = dict(
                Task.objects.filter(run=run, page_type__in=extracting)
                .order_by()
                .values_list("partition")
                .annotate(n=_count())
                .values_list("partition", "n")
            )
        for rule in rules:
            kind = rule["kind"]
            if kind == "coverage":
                results += _coverage(rule, tallies, live, tasks_by_partition, held)
            elif kind == "required":
                results += _required(rule, tallies, live)
            elif kind == "outcome_ratio":
                results += _outcome_ratio(rule, grid)

        # One upsert for every result (a run of 50 partitions and 5 rules has ~250 of them).
        ValidationResult.upsert(run, results, now)
        # A rule dropped from the spec since the last evaluation no longer judges the run.
        ValidationResult.objects.filter(run=run).exclude(
            rule__in=[r["name"] for r in rules]
        ).delete()

        failures = [
            f"{res.rule}: {res.value:.4g} (threshold {res.threshold:.4g})"
            for res in results
            if res.partition == "" and not res.passed
        ]
        evaluation = Evaluation(
            run_id=run.pk,
            passed=not failures,
            failures=failures,
            quarantined=quarantined,
            released=released,
            counts=row_states.state_counts(run.pk),
        )
    # Rules that compare windows judge the rows as decided above, against the previous accepted
    # window's: long reads, so after the write transaction (quality.window_gates says why).
    evaluation.failures += window_gates.judge(run, rules)
    # A listing's stated total against the items found (quality.shortfall), likewise after it.
    evaluation.failures += shortfall.judge(run, rules)
    evaluation.passed = not evaluation.failures
    return evaluation


# --- one function per rule kind: the run-level result and one per partition ---------------


def _log_quarantined(run: Run, partition: str, reason: str) -> None:
    dataset = run.dataset.name
    transaction.on_commit(
        lambda: logs.event(
            log,
            "partition_quarantined",
            "run %s (%s): partition %s quarantined: %s",
            run.pk,
            dataset,
            partition,
            reason,
            run=run.pk,
            dataset=dataset,
            partition=partition,
        )
    )


def _partition_invalid_share(
    rule: dict[str, Any],
    tallies: dict[str, _Tally],
    marked: Any,
    holds: dict[str, list[str]],
) -> list[RuleResult]:
    """Each partition's invalid share of the rule's field against `max`; a marked partition
    over it gets a hold reason in `holds`. The run-level row passes (it reports the worst
    share; the partitions it holds are filled in once every partition rule has spoken)."""
    results = []
    worst = 0.0
    for partition, tally in tallies.items():
        share = _share(tally.field_invalid[rule["field"]], tally.total)
        worst = max(worst, share)
        over = share > rule["max"]
        if over and marked(partition):
            holds[partition].append(f"{rule['name']}: {share:.1%} > {rule['max']:.1%}")
        detail = {"invalid": tally.field_invalid[rule["field"]], "total": tally.total}
        results.append(RuleResult(rule["name"], partition, not over, share, rule["max"], detail))
    results.append(RuleResult(rule["name"], "", True, worst, rule["max"], {"held": []}))
    return results


def _value_rule(
    rule: dict[str, Any], tallies: dict[str, _Tally], live: dict[str, _Tally], limit: float
) -> list[RuleResult]:
    """A range/pattern/enum rule: the invalid share among non-held observations <= `limit`."""
    fails = sum(t.fails[rule["name"]] for t in live.values())
    share = _share(fails, sum(t.total for t in live.values()))
    results = [RuleResult(rule["name"], "", share <= limit, share, limit, {"invalid": fails})]
    for partition, tally in tallies.items():
        pfails = tally.fails[rule["name"]]
        pshare = _share(pfails, tally.total)
        results.append(
            RuleResult(rule["name"], partition, pshare <= limit, pshare, limit, {"invalid": pfails})
        )
    return results


def _coverage(
    rule: dict[str, Any],
    tallies: dict[str, _Tally],
    live: dict[str, _Tally],
    tasks_by_partition: dict[str, int],
    held: set[str],
) -> list[RuleResult]:
    """Valid observations of non-held partitions / logical extracting tasks >= `min`."""
    total_tasks = sum(tasks_by_partition.values())
    valid = sum(t.valid for t in live.values())
    value = _share(valid, total_tasks)
    results = [
        RuleResult(
            rule["name"], "", value >= rule["min"], value, rule["min"],
            {"valid": valid, "tasks": total_tasks},
        )
    ]  # fmt: skip
    for partition, n_tasks in tasks_by_partition.items():
        pvalid = 0 if partition in held or partition not in tallies else tallies[partition].valid
        pvalue = _share(pvalid, n_tasks)
        results.append(
            RuleResult(
                rule["name"], partition, pvalue >= rule["min"], pvalue, rule["min"],
                {"valid": pvalid, "tasks": n_tasks},
            )
        )  # fmt: skip
    return results


def _required(
    rule: dict[str, Any], tallies: dict[str, _Tally], live: dict[str, _Tally]
) -> list[RuleResult]:
    """The share of non-held observations with every required field >= `min`."""
    complete = sum(t.complete for t in live.values())
    live_total = sum(t.total for t in live.values())
    value = _share(complete, live_total)
    results = [
        RuleResult(
            rule["name"], "", value >= rule["min"], value, rule["min"],
            {"complete": complete, "total": live_total},
        )
    ]  # fmt: skip
    for partition, tally in tallies.items():
        pvalue = _share(tally.complete, tally.total)
        results.append(
            RuleResult(rule["name"], partition, pvalue >= rule["min"], pvalue, rule["min"])
        )
    return results


def _outcome_ratio(rule: dict[str, Any], grid: dict[str, dict[str, int]]) -> list[RuleResult]:
    """The share of terminal tasks that ended in the rule's `outcome` >= `min`."""
    results = []
    terminal = outcome = 0
    for partition, states in grid.items():
        pterminal = sum(n for s, n in states.items() if s in TERMINAL)
        poutcome = states.get(rule["outcome"], 0)
        terminal += pterminal
        outcome += poutcome
        pvalue = _share(poutcome, pterminal)
        results.append(
            RuleResult(rule["name"], partition, pvalue >= rule["min"], pvalue, rule["min"])
        )
    value = _share(outcome, terminal)
    results.append(
        RuleResult(
            rule["name"], "", value >= rule["min"], value, rule["min"],
            {"outcome": outcome, "terminal": terminal},
        )
    )  # fmt: skip
    return results


def _count():
    from django.db.models import Count

    return Count("pk")


def stored_failures(run_id: int) -> list[str]:
    """Run-level rules that failed at the last evaluation, in the dashboard's words
    ("coverage 0.754, needs ≥ 0.90": recovery.quality.figures.RuleCheck.failure)."""
    from recovery.quality import figures

    run = Run.objects.select_related("dataset").get(pk=run_id)
    return [check.failure for check in figures.acceptance_failures(run)]
