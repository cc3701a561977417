"""Run status: counts by task state, coverage and acceptance state, cheap at a million tasks.

Task counts come from recovery.counters (a few summed delta rows), never from COUNT(*) over
the task table. Two coverages, named as recovery.quality.figures.GLOSSARY names them: committed
coverage (`coverage` in --json) is committed logical tasks / logical tasks, attempts never enter
it (ten retries of one page are one task); acceptance coverage is the dataset's coverage rule at
its last evaluation, the figure Accept judges.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypedDict

from django.conf import settings
from django.db.models import Sum

from recovery import counters
from recovery.leases import sizing
from recovery.states.choices import TaskState
from recovery.states.task import TERMINAL

if TYPE_CHECKING:
    from recovery.quality.holdups import Holdups

_RUN_REF = re.compile(r"^(?P<dataset>[A-Za-z0-9_-]+)@(?P<window>[A-Za-z0-9._:-]+)$")


class RunNotFound(LookupError):
    """RUN names no run (by id or dataset@window)."""


class RunStatus(TypedDict):
    run: int
    dataset: str
    window: str
    acceptance_state: str
    state_reason: str
    scraper_version: str
    tasks: dict[str, int]
    task_total: int
    terminal: int
    observations: int
    observations_by_validation: dict[str, int]
    coverage: float | None
    acceptance_coverage: dict[str, Any] | None
    coverage_note: str
    credits_used: int
    manifest_sha256: str
    manifest_frozen_at: str | None
    # The dataset's task durations and the lease they imply (recovery.leases.sizing).
    task_times: sizing.LeaseReport
    # The failing rules and quarantined partitions, with a rerun command each (issue 29).
    holdups: Holdups


def find_run(ref: str | int):
    """A run by numeric id or by `dataset@window`."""
    from recovery.models import Run

    text = str(ref).strip()
    if text.isdigit():
        run = Run.objects.select_related("dataset").filter(pk=int(text)).first()
    else:
        match = _RUN_REF.match(text)
        if not match:
            raise RunNotFound(f"RUN {text!r}: give a run id or dataset@window")
        run = (
            Run.objects.select_related("dataset")
            .filter(dataset__name=match["dataset"], window=match["window"])
            .first()
        )
    if run is None:
        raise RunNotFound(f"RUN {text!r}: no such run")
    return run


def run_status(run) -> RunStatus:
    from recovery.models import RemoteJob, ValidationResult
    from recovery.quality import holdups
    from recovery.quality.figures import rule_check, rule_kinds
    from recovery.states import row_states

    by_state = counters.by_state(run.pk)
    tasks = {state: by_state.get(state, 0) for state in TaskState.values}
    # Any state the counters know but the enum does not (should not happen) stays visible.
    tasks.update({s: n for s, n in by_state.items() if s not in tasks})
    total = run.task_total
    # Held is derived from the partitions (row_states); the split still sums to the total.
    by_validation = row_states.state_counts(run.pk)
    kinds = rule_kinds(run.dataset.spec)
    coverage_rules = [name for name, kind in kinds.items() if kind == "coverage"]
    stored = ValidationResult.objects.filter(
        run_id=run.pk, partition="", rule__in=coverage_rules
    ).first()
    acceptance = None
    if stored is not None:
        check = rule_check(stored, kinds)
        acceptance = {
            "rule": check.rule,
            "value": check.value,
            "threshold": check.threshold,
            "passed": check.passed,
            "text": check.failure if not check.passed else f"{check.rule} {check.shown_value}",
            "evaluated_at": check.evaluated_at.isoformat() if check.evaluated_at else None,
        }
    credits = RemoteJob.objects.filter(run_id=run.pk).aggregate(n=Sum("credits_used"))["n"] or 0
    return RunStatus(
        run=run.pk,
        dataset=run.dataset.name,
        window=run.window,
        acceptance_state=run.acceptance_state,
        state_reason=run.state_reason,
        scraper_version=run.scraper_version,
        tasks=tasks,
        task_total=total,
        terminal=sum(n for s, n in tasks.items() if s in TERMINAL),
        observations=sum(by_validation.values()),
        observations_by_validation=by_validation,
        coverage=round(tasks[TaskState.COMMITTED] / total, 6) if total else None,
        acceptance_coverage=acceptance,
        coverage_note=run.coverage_note,
        credits_used=int(credits),
        manifest_sha256=run.manifest_sha256,
        manifest_frozen_at=run.manifest_frozen_at.isoformat() if run.manifest_frozen_at else None,
        task_times=sizing.report(run.dataset, settings.SALVAGE_LEASE_SECONDS),
        holdups=holdups.report(run),
    )


def format_text(status: dict[str, Any]) -> str:
    """A few human-readable lines for the terminal."""
    from recovery.quality import holdups

    coverage = "n/a" if status["coverage"] is None else f"{status['coverage']:.1%}"
    counts = ", ".join(f"{s} {n}" for s, n in status["tasks"].items() if n) or "no tasks"
    lines = [
        f"run {status['run']} {status['dataset']}@{status['window']}: "
        f"{status['acceptance_state']}"
        + (f" ({status['state_reason']})" if status["state_reason"] else ""),
        f"tasks {status['task_total']} ({counts}); terminal {status['terminal']}",
        f"committed coverage {coverage} (committed tasks / logical tasks); "
        f"observations {status['observations']}",
    ]
    accepted = status.get("acceptance_coverage")
    if accepted:
        verdict = "passes" if accepted["passed"] else "fails"
        lines.append(f"acceptance coverage: {accepted['text']} ({verdict} at last evaluation)")
    if status["credits_used"]:
        lines.append(f"credits used {status['credits_used']}")
    if status["coverage_note"]:
        lines.append(f"note: {status['coverage_note']}")
    if status.get("holdups"):
        lines.extend(holdups.lines(status["holdups"]))
    if status.get("task_times"):
        lines.extend(sizing.report_lines(status["task_times"]))
    return "\n".join(lines)
