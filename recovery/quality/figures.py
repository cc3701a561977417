"""The figures operators read on the dashboard, each defined once: words and computation.

`GLOSSARY` (recovery/quality/glossary.py) holds the one definition of each figure; the glossary
page, the tooltips next to every figure and README's dashboard section use these words (a test
compares them). The
functions below compute the figures exactly as the words say, from bounded queries: task
counts from `recovery.counters`, rates from a range of the (run, finished_at, outcome) index,
liveness from the worker heartbeat table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Min, Sum
from django.db.models.functions import TruncMinute
from django.utils import timezone

from recovery.models import (
    Attempt,
    Observation,
    RecoveryBatch,
    RemoteJob,
    Run,
    Task,
    TaskCountDelta,
    ValidationResult,
)
from recovery.ops import liveness
from recovery.quality.glossary import GLOSSARY, RATE_MINUTES
from recovery.states import row_states
from recovery.states.choices import RunState, TaskState
from recovery.states.remote_job import RECONCILE
from recovery.states.task import TERMINAL

# Throughput averages RATE_MINUTES worker-active minutes (a number the glossary's words state,
# so it is defined with them), looked for within RATE_HORIZON.
RATE_HORIZON = timedelta(hours=1)
# Attempt outcomes that leave their task in a final state (what throughput counts).
SETTLED_OUTCOMES = (
    Attempt.Outcome.COMMITTED,
    Attempt.Outcome.GONE,
    Attempt.Outcome.QUARANTINED,
    Attempt.Outcome.DEAD,
)
# At most this many tasks held by provider jobs are read to count them (a lower bound past it).
HELD_CAP = 10_000
# Rule kinds whose value must reach a minimum; every other kind is a share under a maximum.
MIN_RULE_KINDS = frozenset({"coverage", "required", "outcome_ratio"})


def definition(key: str) -> str:
    return GLOSSARY[key][1]


# --- workers -------------------------------------------------------------------------------------


def workers_alive(now: datetime | None = None) -> int:
    """Task workers alive (GLOSSARY["worker_alive"]), by recovery.ops.liveness's definitions: a
    dispatcher or a delivery loop alive does not make a run progress."""
    return liveness.processes().filter(liveness.task_worker_alive_q(now)).count()


# --- throughput ----------------------------------------------------------------------------------


def _activity(run_ids: list[int], now: datetime) -> dict[int, dict[datetime, int]]:
    """{run: {minute: tasks settled in it}} for the whole minutes of the horizon in which an
    attempt of the run finished (settled or not: a retry is activity too).

    A busy run finds its RATE_MINUTES active minutes in the newest RATE_MINUTES minutes, so the
    hour is read only for runs that were idle lately: the (run, finished_at, outcome) index
    range stays as short as the figure needs.
    """
    end = now.replace(second=0, microsecond=0)
    recent = end - timedelta(minutes=RATE_MINUTES)
    activity: dict[int, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    _tally(activity, run_ids, recent, end)
    sparse = [pk for pk in run_ids if len(activity.get(pk, ())) < RATE_MINUTES]
    if sparse:
        _tally(activity, sparse, end - RATE_HORIZON, recent)
    return activity


def _tally(activity, run_ids: list[int], start: datetime, end: datetime) -> None:
    rows = (
        Attempt.objects.filter(run_id__in=run_ids, finished_at__gte=start, finished_at__lt=end)
        .annotate(minute=TruncMinute("finished_at"))
        .values("run_id", "minute", "outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for row in rows:
        settled = row["n"] if row["outcome"] in SETTLED_OUTCOMES else 0
        activity[row["run_id"]][row["minute"]] += settled


def throughput(minutes: dict[datetime, int]) -> float | None:
    """Tasks settled per active minute over the last RATE_MINUTES active minutes."""
    active = sorted(minutes, reverse=True)[:RATE_MINUTES]
    if not active:
        return None
    return sum(minutes[m] for m in active) / len(active)


def _short_runs(
    activity: dict[int, dict[datetime, int]], run_ids: list[int], now: datetime
) -> dict[int, float]:
    """GLOSSARY["throughput"] for runs with fewer than RATE_MINUTES worker-active whole minutes.

    Whole minutes alone misread a short run: in its first minute there is none (no figure at
    all), and a demo run that settled 141 tasks in the 20 s it ran of its first minute read
    "141/min" for the whole next minute, and an ETA of minutes, while it finished 30 s later.
    So a short run counts the current minute too, and divides by the seconds it was active:
    each active minute from the run's first attempt's start (within the horizon) to now.
    """
    end = now.replace(second=0, microsecond=0)
    short = [pk for pk in run_ids if len(activity.get(pk, ())) < RATE_MINUTES]
    if not short:
        return {}
    current: dict[int, dict[datetime, int]] = defaultdict(lambda: defaultdict(int))
    _tally(current, short, end, now + timedelta(microseconds=1))
    # The first attempt's start, read through the (run, finished_at, outcome) index range.
    first = dict(
        Attempt.objects.filter(run_id__in=short, finished_at__gte=end - RATE_HORIZON)
        .values("run_id")
        .annotate(start=Min("started_at"))
        .values_list("run_id", "start")
        .order_by()
    )
    result = {}
    for pk in short:
        minutes = dict(activity.get(pk, {}))
        for minute, n in current.get(pk, {}).items():
            minutes[minute] = minutes.get(minute, 0) + n
        if not minutes:
            continue
        start = first.get(pk) or min(minutes)
        seconds = sum(
            max((min(m + timedelta(minutes=1), now) - max(m, start)).total_seconds(), 0.0)
            for m in minutes
        )
        settled = sum(minutes.values())
        result[pk] = 60.0 * settled / max(seconds, 1.0)
    return result


# --- runs ----------------------------------------------------------------------------------------


@dataclass
class RuleCheck:
    """One stored rule result, ready to show: rounded value, comparison, pass or fail."""

    rule: str
    partition: str
    passed: bool
    value: float | None
    threshold: float | None
    comparison: str  # ">=" or "<="
    detail: dict
    evaluated_at: datetime | None = None
    kind: str = ""

    @property
    def symbol(self) -> str:
        return "≥" if self.comparison == ">=" else "≤"

    @property
    def holds(self) -> bool:
        """A partition rule's run-level row (GLOSSARY["rule_result"]): it compares nothing
        itself (the stored value is the worst partition's share, which the partition rows show)
        and passes; what it did is hold the partitions over the maximum."""
        return self.kind == "partition_invalid_share" and self.partition == ""

    @property
    def held(self) -> list[str]:
        return list(self.detail.get("held") or [])

    @property
    def held_text(self) -> str:
        """ "holds 2 partitions: p1, p2" on a partition rule's run-level row, else ""."""
        if not self.holds:
            return ""
        if not self.held:
            return "holds no partition"
        n = len(self.held)
        return f"holds {n} partition{'s' if n != 1 else ''}: {', '.join(self.held)}"

    @property
    def shown_value(self) -> str:
        if self.holds:
            return "—"
        return "" if self.value is None else f"{self.value:.3f}"

    @property
    def shown_threshold(self) -> str:
        if self.threshold is None:
            return ""
        text = f"{self.threshold:.3f}".rstrip("0")
        if len(text.split(".")[1]) < 2:
            text = f"{self.threshold:.2f}"
        if self.holds:
            return f"each partition {self.symbol} {text}"
        return f"{self.symbol} {text}"

    @property
    def failure(self) -> str:
        """ "coverage 0.754, needs ≥ 0.90" (the words Accept uses when it refuses)."""
        if self.detail.get("summary"):  # a rule that compares windows says it in words
            return f"{self.rule}: {self.detail['summary']}"
        if self.value is None or self.threshold is None:
            return f"{self.rule} failed"
        return f"{self.rule} {self.shown_value}, needs {self.shown_threshold}"


def rule_kinds(spec: dict) -> dict[str, str]:
    return {r["name"]: r["kind"] for r in (spec or {}).get("rules", []) if "name" in r}


def rule_check(result: ValidationResult, kinds: dict[str, str]) -> RuleCheck:
    kind = kinds.get(result.rule, "")
    return RuleCheck(
        rule=result.rule,
        partition=result.partition,
        passed=result.passed,
        value=result.value,
        threshold=result.threshold,
        comparison=">=" if kind in MIN_RULE_KINDS else "<=",
        detail=result.detail or {},
        evaluated_at=result.evaluated_at,
        kind=kind,
    )


@dataclass
class RunFigures:
    state: str
    total: int
    counts: dict[str, int] = field(default_factory=dict)
    throughput: float | None = None  # tasks per worker-active minute
    new: bool = False  # the run was created within RATE_HORIZON (what "yet" can say)
    awaiting_decision: int = 0
    workers_alive: int = 0  # task workers (GLOSSARY["worker_alive"])
    credits: int = 0
    acceptance_coverage: RuleCheck | None = None
    failing_rules: list[RuleCheck] = field(default_factory=list)
    coverage_rule: bool = False  # the dataset's spec has a coverage rule

    @property
    def coverage_absent(self) -> str:
        """Why no acceptance coverage is shown, in a few words that are true of this run."""
        if not self.coverage_rule:
            return "no coverage rule (the dataset's spec has none)"
        return "not evaluated yet (the rules run when every task has settled)"

    @property
    def committed(self) -> int:
        return self.counts.get(TaskState.COMMITTED, 0)

    @property
    def committed_coverage(self) -> float | None:
        return self.committed / self.total if self.total else None

    @property
    def settled(self) -> int:
        return sum(n for s, n in self.counts.items() if s in TERMINAL)

    @property
    def settled_share(self) -> float | None:
        return self.settled / self.total if self.total else None

    @property
    def remaining(self) -> int:
        return max(self.total - self.settled, 0)

    @property
    def collecting(self) -> bool:
        return self.state == RunState.COLLECTING

    @property
    def blocked(self) -> list[str]:
        """Why a collecting run cannot progress (GLOSSARY["blocked"]); empty when it can."""
        if not self.collecting:
            return []
        reasons = []
        if self.awaiting_decision:
            n = self.awaiting_decision
            tasks = f"{n} tasks await" if n != 1 else "1 task awaits"
            reasons.append(f"blocked: {tasks} a reconcile decision")
        if not self.workers_alive:
            reasons.append("no task worker alive")
        return reasons

    @property
    def eta_minutes(self) -> float | None:
        """GLOSSARY["eta"]: None whenever the words say it is not shown."""
        if not self.collecting or self.blocked or not self.remaining:
            return None
        if not self.throughput:
            return None
        return self.remaining / self.throughput

    @property
    def eta_absent(self) -> str:
        """Why no ETA is shown, in a few words."""
        if not self.collecting:
            return f"run is {self.state}"
        if self.blocked:
            return self.blocked[0]
        if not self.remaining:
            return "every task settled"
        if self.throughput is None and self.new:
            return "no attempt of the run has finished yet"
        if self.throughput is None:
            return "nothing ran in the past hour"
        return "attempts finished, but no task settled in the run's worker-active minutes"


def run_figures(runs: Iterable[Run], now: datetime | None = None) -> dict[int, RunFigures]:
    """The figures of a page of runs, in a fixed number of grouped queries."""
    now = now or timezone.now()
    runs = list(runs)
    ids = [run.pk for run in runs]
    alive = workers_alive(now)
    result = {
        run.pk: RunFigures(state=run.acceptance_state, total=run.task_total, workers_alive=alive)
        for run in runs
    }
    for row in (
        TaskCountDelta.objects.filter(run_id__in=ids)
        .values("run_id", "state")
        .annotate(n=Sum("delta"))
        .order_by()
    ):
        if row["n"]:
            result[row["run_id"]].counts[row["state"]] = row["n"]
    for figures in result.values():
        figures.total = max(figures.total, sum(figures.counts.values()))
    for run in runs:
        result[run.pk].new = run.created_at > now - RATE_HORIZON
    activity = _activity(ids, now)
    for run_id, minutes in activity.items():
        result[run_id].throughput = throughput(minutes)
    for run_id, rate in _short_runs(activity, ids, now).items():
        result[run_id].throughput = rate
    for run_id, n in awaiting_decision(ids).items():
        result[run_id].awaiting_decision = n
    for row in (
        RemoteJob.objects.filter(run_id__in=ids)
        .values("run_id")
        .annotate(n=Sum("credits_used"))
        .order_by()
    ):
        result[row["run_id"]].credits = row["n"] or 0
    kinds = {run.pk: rule_kinds(run.dataset.spec) for run in runs}
    for run_id, named in kinds.items():
        result[run_id].coverage_rule = "coverage" in named.values()
    for stored in ValidationResult.objects.filter(run_id__in=ids, partition=""):
        check = rule_check(stored, kinds[stored.run_id])
        figures = result[stored.run_id]
        if kinds[stored.run_id].get(stored.rule) == "coverage":
            figures.acceptance_coverage = check
        if not check.passed:
            figures.failing_rules.append(check)
    return result


# Pages never COUNT a run's tasks (tests/db/test_dashboard_scale.py): the drift figure reads
# at most this many ids through the partial task_run_drift_idx and says "or more" past it.
DRIFT_CAP = 10_000


def inventory_drift(run_id: int) -> int:
    """GLOSSARY["inventory_drift"]: tasks of the run that only the head re-read found.

    Capped at DRIFT_CAP + 1, so a value above DRIFT_CAP means "more than DRIFT_CAP".
    """
    ids = Task.objects.filter(run_id=run_id, discovery=Task.Discovery.DRIFT).values_list(
        "id", flat=True
    )
    return len(ids[: DRIFT_CAP + 1])


# Sitemap files read for the progress figure (through the partial task_run_sitemap_idx);
# an index lists at most 50,000, so a run past this is shown as "more than".
SITEMAP_CAP = 10_000
_ID_CHUNK = 900  # ids per IN (...) query: under SQLite's oldest parameter limit


@dataclass(frozen=True)
class SitemapProgress:
    files_read: int
    files_known: int
    urls_listed: int
    capped: bool  # more than SITEMAP_CAP files: the figures cover the first SITEMAP_CAP

    @property
    def done(self) -> bool:
        return self.files_read == self.files_known and not self.capped


def sitemap_progress(run_id: int) -> SitemapProgress | None:
    """GLOSSARY["sitemap_progress"]; None for a run without sitemap discovery."""
    from recovery.fetch.sitemaps import SITEMAP_PAGE_TYPE

    rows = list(
        Task.objects.filter(run_id=run_id, page_type=SITEMAP_PAGE_TYPE).values_list("id", "state")[
            : SITEMAP_CAP + 1
        ]
    )
    if not rows:
        return None
    capped = len(rows) > SITEMAP_CAP
    rows = rows[:SITEMAP_CAP]
    terminal = {str(s) for s in TERMINAL}
    committed = [pk for pk, state in rows if state == TaskState.COMMITTED]
    urls = 0
    for start in range(0, len(committed), _ID_CHUNK):
        notes = Attempt.objects.filter(
            task_id__in=committed[start : start + _ID_CHUNK], outcome=Attempt.Outcome.COMMITTED
        ).values_list("artefact", flat=True)
        for note in notes:
            counts = (note or {}).get("sitemap") or {}
            urls += int(counts.get("urls", 0))
    return SitemapProgress(
        files_read=sum(1 for _pk, state in rows if state in terminal),
        files_known=len(rows),
        urls_listed=urls,
        capped=capped,
    )


def awaiting_decision(run_ids: list[int]) -> dict[int, int]:
    """{run: tasks held by remote jobs that await a reconcile decision}."""
    jobs = dict(
        RemoteJob.objects.filter(run_id__in=run_ids, state__in=RECONCILE).values_list(
            "pk", "run_id"
        )[:1000]
    )
    counts: dict[int, int] = defaultdict(int)
    for job_pk, n in held_by_jobs(list(jobs)).items():
        counts[jobs[job_pk]] += n
    return dict(counts)


def held_by_jobs(job_ids: list[int]) -> dict[int, int]:
    """{remote job: tasks it holds} (the tasks in state `remote` that name the job)."""
    if not job_ids:
        return {}
    # Read at most HELD_CAP rows through task_remote_job_idx (a provider job holds one batch
    # of tasks), never a count over the task table; past the cap the figure is a lower bound.
    held = Task.objects.filter(state=TaskState.REMOTE, remote_job_id__in=job_ids).values_list(
        "remote_job_id", flat=True
    )
    counts: dict[int, int] = defaultdict(int)
    for job_pk in held[:HELD_CAP]:
        counts[job_pk] += 1
    return dict(counts)


def acceptance_failures(run: Run) -> list[RuleCheck]:
    """The run-level rules that failed at the last evaluation (why Accept is disabled)."""
    kinds = rule_kinds(run.dataset.spec)
    return [
        rule_check(r, kinds)
        for r in ValidationResult.objects.filter(run=run, partition="", passed=False).order_by(
            "rule"
        )
    ]


def rule_checks(run: Run, limit: int = 500) -> list[RuleCheck]:
    """Every stored rule result of a run: failures first, the run-level row before partitions."""
    kinds = rule_kinds(run.dataset.spec)
    rows = ValidationResult.objects.filter(run=run).order_by("passed", "rule", "partition")
    return [rule_check(r, kinds) for r in rows[:limit]]


# --- recovery batches ----------------------------------------------------------------------------


@dataclass
class BatchOutcome:
    """GLOSSARY["batch_outcome"] for one batch."""

    state: str
    total: int
    counts: dict[str, int] = field(default_factory=dict)  # the batch's tasks by state
    invalid_data: int = 0  # committed tasks whose data is still invalid or held

    @property
    def recovered(self) -> int:
        return max(self.counts.get(TaskState.COMMITTED, 0) - self.invalid_data, 0)

    @property
    def still_failing(self) -> int:
        return self.counts.get(TaskState.QUARANTINED, 0) + self.invalid_data

    @property
    def dead(self) -> int:
        return self.counts.get(TaskState.DEAD, 0)

    @property
    def gone(self) -> int:
        return self.counts.get(TaskState.GONE, 0)

    @property
    def settled(self) -> int:
        return sum(n for s, n in self.counts.items() if s in TERMINAL)

    @property
    def completed(self) -> bool:
        return self.state == RecoveryBatch.State.COMPLETED

    @property
    def badge(self) -> str:
        if self.completed:
            return f"completed, {self.recovered} of {self.total} recovered"
        return f"{self.state}, {self.settled} of {self.total} settled"

    @property
    def tone(self) -> str:
        """ok only when every task of a completed batch was recovered."""
        if not self.completed:
            return "running"
        if self.recovered == self.total:
            return "ok"
        return "bad" if self.recovered == 0 else "partial"


def batch_outcome(batch: RecoveryBatch) -> BatchOutcome:
    """A completed batch's figures as stored at completion; a running batch's live counts."""
    stored = batch.outcome if batch.state == RecoveryBatch.State.COMPLETED else None
    if not stored:
        stored = outcome_counts(batch.pk, judge=batch.state == RecoveryBatch.State.COMPLETED)
    counts = {s: int(n) for s, n in stored.get("states", {}).items()}
    return BatchOutcome(
        state=batch.state,
        total=max(batch.task_count, sum(counts.values())),
        counts=counts,
        invalid_data=int(stored.get("invalid_data", 0)),
    )


def outcome_counts(batch_id: int, *, judge: bool = True) -> dict:
    """{"states": the batch's tasks by state, "invalid_data": committed tasks with an
    observation that is not valid as shown, a held one included}: what a batch keeps when it
    completes (RecoveryBatch.outcome), after its repaired partitions were judged again."""
    states = dict(
        Task.objects.filter(recovery_batch_id=batch_id)
        .values_list("state")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("state", "n")
    )
    invalid = 0
    run_id = None
    if judge:
        run_id = RecoveryBatch.objects.filter(pk=batch_id).values_list("run_id", flat=True).first()
    if run_id is not None:
        # Held by its partition's quarantine counts as not valid, whatever the row's verdict.
        invalid = (
            Observation.objects.filter(
                run_id=run_id,
                source_task__recovery_batch_id=batch_id,
                source_task__state=TaskState.COMMITTED,
            )
            .filter(row_states.not_valid(run_id))
            .values("source_task_id")
            .distinct()
            .count()
        )
    return {"states": states, "invalid_data": invalid}
