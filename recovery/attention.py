"""What needs someone now: the "needs attention" page, and the count in every page's top bar.

Each condition is defined once here, in words (`DEFINITIONS`, shown on the page) and as the query
beside them; the lists the page links to filter through the same query (the runs list's and the
deliveries list's `needs` filter, the schedules list's `needs=overdue_schedules`), so a count and
the rows behind its link cannot disagree.

Cost: `summary()` runs on every dashboard page (the top bar), so each condition is one query read
through an index or over a small table, and counts stop at CAP (shown as "500+"):
- runs (one row per dataset and window, a small table): candidates failing a run-level rule,
  runs with unreviewed quarantined partitions (runpartition is a run's partitions), blocked runs
  (their open reconcile jobs through remotejob_due_idx, each job's held tasks probed through
  task_remote_job_idx; never a count over tasks);
- open reconcile jobs through remotejob_due_idx; failing deliveries through outbox_due_idx;
- active schedules (a small table; each one's recurrence computed in Python, stopping at the
  first missed window); stale heartbeats through heartbeat_last_seen_idx, and only when there
  are some, one probe of task_claim_idx for a due task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from recovery.delivery import outbox
from recovery.intake import recurrence
from recovery.leases.statements import due_sql
from recovery.models import (
    OutboxEvent,
    RemoteJob,
    Run,
    RunPartition,
    Schedule,
    Task,
    ValidationResult,
    WorkerHeartbeat,
)
from recovery.ops import liveness
from recovery.quality import figures
from recovery.states.choices import RunState
from recovery.states.remote_job import RECONCILE

CAP = 500  # a count stops here ("500+"): the top bar reads at most CAP + 1 rows per condition
ITEMS = 10  # rows the attention page names under each condition
MAX_SCHEDULES = 1000  # active schedules looked at (and so listed by ?needs=overdue_schedules)

FAILING_CANDIDATES = "failing_candidates"
BLOCKED_RUNS = "blocked_runs"
UNREVIEWED_QUARANTINE = "unreviewed_quarantine"
RECONCILE_WAITING = "reconcile_waiting"
FAILING_DELIVERIES = "failing_deliveries"
OVERDUE_SCHEDULES = "overdue_schedules"
DEAD_WORKERS = "dead_workers"

# (label, definition) per condition, in the page's order.
DEFINITIONS: dict[str, tuple[str, str]] = {
    FAILING_CANDIDATES: (
        "Candidates failing validation",
        "Candidate runs with a run-level rule that failed at the last evaluation: they cannot "
        "be accepted until a recovery batch repairs them or an admin rejects them.",
    ),
    BLOCKED_RUNS: (
        "Blocked runs",
        "Collecting runs that cannot progress without someone: tasks that await a reconcile "
        'decision, or no task worker alive (the run page\'s "blocked").',
    ),
    UNREVIEWED_QUARANTINE: (
        "Unreviewed quarantine",
        "Runs (not rejected) with a quarantined partition nobody has marked reviewed.",
    ),
    RECONCILE_WAITING: (
        "Reconcile items waiting",
        "Remote jobs whose submission outcome is unknown or whose job the provider cannot "
        "find: nothing is resubmitted until someone decides.",
    ),
    FAILING_DELIVERIES: (
        "Failing deliveries",
        "Outbox events whose last delivery attempt failed or may have landed (uncertain).",
    ),
    OVERDUE_SCHEDULES: (
        "Overdue schedules",
        "Active schedules with a window due for longer than two of the dispatcher's schedule "
        "checks (at least a minute) and no run made for it: no dispatcher is running, or the "
        "manifest fails.",
    ),
    DEAD_WORKERS: (
        "Dead workers",
        "Processes whose heartbeat stopped without a clean exit (stale on the workers page) "
        "while tasks are due.",
    ),
}


@dataclass(frozen=True)
class Item:
    """One row behind a condition, for the page to name and link."""

    pk: int | str
    label: str
    detail: str = ""


@dataclass(frozen=True)
class Condition:
    key: str
    count: int  # at most CAP + 1; `capped` when it reached that
    items: tuple[Item, ...] = ()
    # What was not looked at, said beside the count (overdue schedules past MAX_SCHEDULES).
    note: str = ""

    @property
    def capped(self) -> bool:
        return self.count > CAP

    @property
    def shown(self) -> str:
        return f"{CAP}+" if self.capped else str(self.count)

    @property
    def label(self) -> str:
        return DEFINITIONS[self.key][0]

    @property
    def definition(self) -> str:
        return DEFINITIONS[self.key][1]


@dataclass(frozen=True)
class Summary:
    conditions: tuple[Condition, ...]

    def count(self, keys: Iterable[str] | None = None) -> int:
        """The conditions' counts added up (only `keys`, when given)."""
        wanted = set(DEFINITIONS if keys is None else keys)
        return sum(c.count for c in self.conditions if c.key in wanted)

    def get(self, key: str) -> Condition:
        return next(c for c in self.conditions if c.key == key)


# --- the conditions as querysets (the lists filter through these) ---------------------------


def failing_candidates() -> QuerySet[Run]:
    failing = ValidationResult.objects.filter(partition="", passed=False).values("run_id")
    return Run.objects.filter(acceptance_state=RunState.CANDIDATE, pk__in=failing)


def task_worker_alive(now: datetime | None = None) -> bool:
    # The run page's own test (recovery.quality.figures), so "blocked" means the same here.
    return figures.workers_alive(now) > 0


def blocked_runs(now: datetime | None = None) -> QuerySet[Run]:
    """recovery.quality.figures' "blocked", for every collecting run at once."""
    collecting = Run.objects.filter(acceptance_state=RunState.COLLECTING)
    if not task_worker_alive(now):
        return collecting
    # A job holds a task when a task names it (task_remote_job_state_ck: only remote tasks do).
    holding = RemoteJob.objects.filter(state__in=sorted(RECONCILE)).filter(
        Exists(Task.objects.filter(remote_job_id=OuterRef("pk")))
    )
    return collecting.filter(pk__in=holding.values("run_id"))


def unreviewed_quarantine() -> QuerySet[Run]:
    flagged = RunPartition.objects.filter(quarantined=True, reviewed_by="").values("run_id")
    return Run.objects.exclude(acceptance_state=RunState.REJECTED).filter(pk__in=flagged)


RUN_CONDITIONS = {
    FAILING_CANDIDATES: failing_candidates,
    BLOCKED_RUNS: blocked_runs,
    UNREVIEWED_QUARANTINE: unreviewed_quarantine,
}


def runs_needing(key: str) -> QuerySet[Run]:
    """The runs of one run condition (the runs list's `needs` filter)."""
    return RUN_CONDITIONS[key]()


def reconcile_waiting() -> QuerySet[RemoteJob]:
    return RemoteJob.objects.filter(state__in=sorted(RECONCILE))


def failing_deliveries() -> QuerySet[OutboxEvent]:
    return OutboxEvent.objects.filter(outbox.failing_q())


def overdue_schedules(now: datetime | None = None) -> list[tuple[Schedule, datetime, str]]:
    """(schedule, its oldest late instant, that window) for each overdue schedule, by dataset:
    recovery.intake.recurrence.overdue, the one definition the Schedules page also shows."""
    return _overdue(now or timezone.now())[0]


def _overdue(now: datetime) -> tuple[list[tuple[Schedule, datetime, str]], int]:
    """overdue_schedules(now), and how many active schedules past MAX_SCHEDULES were not
    looked at (each is evaluated in Python: recurrence rules are not SQL)."""
    active = (
        Schedule.objects.select_related("dataset")
        .filter(paused=False)
        .order_by("dataset__name", "name")
    )
    looked = list(active[: MAX_SCHEDULES + 1])
    unchecked = 0
    if len(looked) > MAX_SCHEDULES:
        looked = looked[:MAX_SCHEDULES]
        unchecked = active.count() - MAX_SCHEDULES
    found = []
    for schedule in looked:
        late = recurrence.overdue(schedule, now)
        if late is not None:
            found.append((schedule, *late))
    return found, unchecked


def _tasks_due() -> bool:
    """Is any task claimable now (the claim's own test, task_claim_idx)?"""
    with connection.cursor() as cursor:
        # With a parameter, so the statement's %% reads as % (as the claim's does).
        cursor.execute(f"SELECT 1 FROM recovery_task WHERE {due_sql()} LIMIT %s", [1])
        return cursor.fetchone() is not None


def dead_workers(now: datetime | None = None) -> QuerySet[WorkerHeartbeat]:
    """Stale heartbeats, or none when no task is due (nobody waits for those processes)."""
    stale = liveness.processes().filter(liveness.status_q(liveness.Status.STALE, now))
    if not stale.exists() or not _tasks_due():
        return WorkerHeartbeat.objects.none()
    return stale


# --- the summary -------------------------------------------------------------------------------


def _count(qs: QuerySet) -> int:
    # COUNT over a LIMIT: bounded however many rows match.
    return qs.order_by()[: CAP + 1].count()


def _count_ids(qs: QuerySet) -> int:
    # The ids read instead of counted: blocked runs' query probes the task table, and pages
    # never COUNT over it (tests/db/test_dashboard_scale.py).
    return len(set(qs.order_by().values_list("pk", flat=True)[: CAP + 1]))


def _run_items(qs: QuerySet[Run], key: str) -> tuple[Item, ...]:
    runs = list(qs.select_related("dataset").order_by("-pk")[:ITEMS])
    detail: dict[int, str] = {}
    if key == FAILING_CANDIDATES:
        rules: dict[int, list[str]] = {}
        failed = ValidationResult.objects.filter(
            run_id__in=[r.pk for r in runs], partition="", passed=False
        ).order_by("rule")
        for run_id, rule in failed.values_list("run_id", "rule"):
            rules.setdefault(run_id, []).append(rule)
        detail = {pk: "fails " + ", ".join(names) for pk, names in rules.items()}
    elif key == BLOCKED_RUNS:
        why = "tasks await a reconcile decision" if task_worker_alive() else "no task worker alive"
        detail = {r.pk: why for r in runs}
    elif key == UNREVIEWED_QUARANTINE:
        parts: dict[int, list[str]] = {}
        flagged = RunPartition.objects.filter(
            run_id__in=[r.pk for r in runs], quarantined=True, reviewed_by=""
        ).order_by("name")
        for run_id, name in flagged.values_list("run_id", "name")[: ITEMS * 20]:
            parts.setdefault(run_id, []).append(name or "(none)")
        detail = {pk: "not reviewed: " + ", ".join(names) for pk, names in parts.items()}
    return tuple(Item(r.pk, str(r), detail.get(r.pk, "")) for r in runs)


def _late(instant: datetime, window: str, error: str) -> str:
    late = f"window {window}, due {instant:%Y-%m-%d %H:%M} UTC"
    return f"{late}; last error: {error[:200]}" if error else late


def summary(now: datetime | None = None, *, items: bool = False) -> Summary:
    """Every condition's count (the top bar); with `items`, the first ITEMS rows of each (the
    attention page)."""
    now = now or timezone.now()
    conditions = []
    for key in RUN_CONDITIONS:
        qs = blocked_runs(now) if key == BLOCKED_RUNS else runs_needing(key)
        count = _count_ids(qs) if key == BLOCKED_RUNS else _count(qs)
        found = _run_items(qs, key) if items and count else ()
        conditions.append(Condition(key, count, found))

    jobs = reconcile_waiting()
    count = _count(jobs)
    listed: tuple[Item, ...] = ()
    if items and count:
        listed = tuple(
            Item(job.pk, f"remote job #{job.pk}", f"{job.provider} {job.kind}, {job.state}")
            for job in jobs.order_by("-pk")[:ITEMS]
        )
    conditions.append(Condition(RECONCILE_WAITING, count, listed))

    events = failing_deliveries()
    count = _count(events)
    listed = ()
    if items and count:
        listed = tuple(
            Item(
                str(e.pk),
                f"{e.event_type} event {str(e.pk)[:8]}",
                f"{e.state}: {e.last_error}"[:200],
            )
            for e in events.order_by("-created_at", "-pk")[:ITEMS]
        )
    conditions.append(Condition(FAILING_DELIVERIES, count, listed))

    overdue, unchecked = _overdue(now)
    listed = ()
    if items:
        listed = tuple(
            Item(s.pk, str(s), _late(instant, window, s.last_error))
            for s, instant, window in overdue[:ITEMS]
        )
    note = (
        f"only the first {MAX_SCHEDULES:,} active schedules (by dataset and name) were looked "
        f"at; {unchecked:,} more were not: the Schedules page and "
        "salvage_schedule_overdue_seconds show each one"
        if unchecked
        else ""
    )
    conditions.append(Condition(OVERDUE_SCHEDULES, len(overdue), listed, note))

    workers = dead_workers(now)
    count = _count(workers)
    listed = ()
    if items and count:
        listed = tuple(
            Item(w.pk, w.worker, f"{w.kind or 'unknown kind'} on {w.hostname}, pid {w.pid}")
            for w in workers.order_by("-last_seen")[:ITEMS]
        )
    conditions.append(Condition(DEAD_WORKERS, count, listed))
    return Summary(tuple(conditions))
