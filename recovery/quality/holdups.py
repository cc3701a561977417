"""What holds a run back, in words a terminal shows: the rules that failed at the last
evaluation (value and threshold) and the partitions held out of it (why, how many rows and
tasks), each with the `manage.py rerun` command that recovers it (issue 29).

`report(run)` reads it once into a JSON-able dict (`runstatus --json` prints it as it is);
`lines(report)` is its one spelling as text, which `runstatus` and `accept`'s refusal both
print, so the command line names what failed without the dashboard. A partition's quarantined
tasks are named by their error classes (login_wall, consent_page...), read as the quarantine
page reads them.

Bounded however big the run is: task counts per partition come from the counters (never the
task table), quarantine flags are read up to quarantine.PARTITION_CAP, and rows are counted
only for the SHOWN partitions listed; the rest are summed up as "and N more".
"""

from __future__ import annotations

import shlex
from typing import TypedDict

from django.db.models import Count

from recovery import counters
from recovery.models import Observation, Run, RunPartition
from recovery.quality import figures, quarantine
from recovery.states.choices import TaskState

SHOWN = 20  # partitions listed; the others are counted


class FailingRule(TypedDict):
    rule: str
    value: float | None
    threshold: float | None
    text: str  # "coverage 0.705, needs ≥ 0.90" (figures.RuleCheck.failure)


class HeldPartition(TypedDict):
    name: str
    reason: str  # the quarantine flag's reason ("rule partition_invalid_prices: 40.0% > 5.0%")
    rows_held: int  # its observations, held out while the flag is up
    quarantined_tasks: int
    # Why its tasks were quarantined: {error class: tasks}, most first (login_wall, consent...)
    error_classes: dict[str, int]
    dead_tasks: int
    tasks: int
    rerun: str  # the command that reruns its settled tasks


class Holdups(TypedDict):
    failing_rules: list[FailingRule]
    partitions: list[HeldPartition]  # at most SHOWN: flagged first, then most quarantined
    more_partitions: int  # held partitions not listed
    # The error classes were read from the first quarantine.SAMPLE_CAP quarantined tasks only.
    error_classes_sampled: bool


def rerun_command(run_id: int, partition: str) -> str:
    """The command line that reruns one partition (quoted for a POSIX shell); TEXT is the
    reason the operator must give, as the DESIGN command-line table spells it."""
    return f"manage.py rerun {run_id} --partition {shlex.quote(partition)} --reason TEXT"


def report(run: Run) -> Holdups:
    """The run's failing run-level rules and held partitions (flagged first, then the most
    quarantined tasks, then by name, as the quarantine page orders them), at most SHOWN."""
    rules = [
        FailingRule(rule=c.rule, value=c.value, threshold=c.threshold, text=c.failure)
        for c in figures.acceptance_failures(run)
    ]
    grid = counters.by_partition(run.pk)
    flags = {
        p.name: p
        for p in RunPartition.objects.filter(run=run, quarantined=True)[: quarantine.PARTITION_CAP]
    }
    # Held: flagged, or with tasks that ended quarantined or dead (what a rerun recovers).
    names = set(flags) | {
        name
        for name, states in grid.items()
        if states.get(TaskState.QUARANTINED) or states.get(TaskState.DEAD)
    }

    def order(name: str) -> tuple[bool, int, str]:  # as the quarantine page orders them
        return (name not in flags, -grid.get(name, {}).get(TaskState.QUARANTINED, 0), name)

    shown = sorted(names, key=order)[:SHOWN]
    # Error classes only when a listed partition has quarantined tasks: one read of at most
    # SAMPLE_CAP of them (the (run, state, id) index), the quarantine page's own grouping.
    classes: dict[str, dict[str, int]] = {}
    sampled = False
    if any(grid.get(name, {}).get(TaskState.QUARANTINED) for name in shown):
        groups, sampled = quarantine.error_groups(run.pk, TaskState.QUARANTINED)
        for group in groups:
            for name, n in group.partitions.items():
                classes.setdefault(name, {})[group.error_class or "unclassified"] = n
    rows = dict(
        Observation.objects.filter(run_id=run.pk, partition__in=[n for n in shown if n in flags])
        .order_by()
        .values_list("partition")
        .annotate(n=Count("pk"))
    )
    partitions = [
        HeldPartition(
            name=name,
            reason=(flags[name].quarantine_reason or "quarantined") if name in flags else "",
            rows_held=rows.get(name, 0) if name in flags else 0,
            quarantined_tasks=grid.get(name, {}).get(TaskState.QUARANTINED, 0),
            error_classes=dict(
                sorted(classes.get(name, {}).items(), key=lambda kv: (-kv[1], kv[0]))
            ),
            dead_tasks=grid.get(name, {}).get(TaskState.DEAD, 0),
            tasks=sum(grid.get(name, {}).values()),
            rerun=rerun_command(run.pk, name),
        )
        for name in shown
    ]
    return Holdups(
        failing_rules=rules,
        partitions=partitions,
        more_partitions=len(names) - len(shown),
        error_classes_sampled=sampled,
    )


def _partition_line(p: HeldPartition) -> str:
    what = []
    if p["reason"]:
        what.append(f"{p['reason']} ({_count(p['rows_held'], 'row')} held)")
    ended = []
    if p["quarantined_tasks"]:
        why = ", ".join(f"{cls} {n}" for cls, n in p["error_classes"].items())
        ended.append(f"{p['quarantined_tasks']} quarantined" + (f" ({why})" if why else ""))
    if p["dead_tasks"]:
        ended.append(f"{p['dead_tasks']} dead")
    if ended:
        what.append(f"{', '.join(ended)} of {_count(p['tasks'], 'task')}")
    return f"  {p['name']}: " + "; ".join(what)


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def lines(holdups: Holdups) -> list[str]:
    """The failing rules and held partitions as text (none when nothing holds the run)."""
    out = []
    if holdups["failing_rules"]:
        out.append("failing rules (at the last evaluation):")
        out.extend(f"  {rule['text']}" for rule in holdups["failing_rules"])
    held = holdups["partitions"]
    if held:
        total = len(held) + holdups["more_partitions"]
        out.append(f"quarantined partitions ({total}), each rerun with:")
        for p in held:
            out.append(_partition_line(p))
            out.append(f"    {p['rerun']}")
        if holdups["more_partitions"]:
            out.append(
                f"  and {holdups['more_partitions']} more "
                "(the run's quarantine page lists them all)"
            )
        if holdups["error_classes_sampled"]:
            out.append(
                f"  (error classes counted in the first {quarantine.SAMPLE_CAP:,} "
                "quarantined tasks)"
            )
    return out
