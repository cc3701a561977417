"""The quarantine page's data, read once: what is held in a run, why, and what a batch can rerun.

`page(run, state)` returns small dataclasses the dashboard renders as they are: the partitions
that hold something (flagged first, then by quarantined tasks), the tasks in `state` grouped by
error class, what a recovery batch of this run can select, and its recent batches and notes.
Every read is bounded however big the run is: partition totals come from the counters, error
groups from at most SAMPLE_CAP tasks (the first ids of the (run, state, id) index), error
classes from a skip scan (recovery.quality.errorclasses). Reads only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

from recovery import counters
from recovery.models import (
    Attempt,
    RecoveryBatch,
    Run,
    RunPartition,
    Task,
    TriageNote,
    ValidationResult,
)
from recovery.quality import errorclasses, figures
from recovery.states.choices import TaskState

SAMPLE_CAP = 10_000
# The page shows at most this many of each; the partitions' own flags at most PARTITION_CAP.
BATCHES_SHOWN = 10
NOTES_SHOWN = 20
PARTITION_CAP = 5000
RULES_CAP = 500


@dataclass(frozen=True)
class PartitionRow:
    name: str
    flag: RunPartition | None  # its quarantine flag and review mark, if the run has one
    quarantined: int
    dead: int
    total: int

    @property
    def flagged(self) -> bool:
        return bool(self.flag and self.flag.quarantined)


@dataclass
class ErrorGroup:
    error_class: str
    tasks: int = 0
    partitions: dict[str, int] = field(default_factory=dict)
    sample_task_id: int | None = None
    sample_attempt: Attempt | None = None


@dataclass(frozen=True)
class BatchOptions:
    """What a recovery batch of this run can select, for the batch form."""

    partitions: list[str]  # every partition with tasks
    page_types: list[str]
    rules: list[str]  # the rules that failed
    error_classes: list[errorclasses.Present]
    flagged: list[str]  # the quarantined partitions, marked on the form (not ticked)


@dataclass(frozen=True)
class BatchRow:
    batch: RecoveryBatch
    outcome: figures.BatchOutcome  # its badge figures


@dataclass(frozen=True)
class QuarantinePage:
    state: str  # whose tasks are grouped: quarantined or dead
    partitions: list[PartitionRow]
    groups: list[ErrorGroup]
    capped: bool  # the groups were read from the first SAMPLE_CAP tasks only
    sample_cap: int
    batch_options: BatchOptions
    batches: list[BatchRow]
    notes: list[TriageNote]


def page(run: Run, state: str) -> QuarantinePage:
    """Everything the quarantine page shows besides its task list (dashboard.lists)."""
    grid = counters.by_partition(run.pk)
    flags = {p.name: p for p in RunPartition.objects.filter(run=run)[:PARTITION_CAP]}
    partitions = [
        PartitionRow(
            name=name,
            flag=flags.get(name),
            quarantined=grid.get(name, {}).get(TaskState.QUARANTINED, 0),
            dead=grid.get(name, {}).get(TaskState.DEAD, 0),
            total=sum(grid.get(name, {}).values()),
        )
        for name in sorted(set(grid) | set(flags))
    ]
    partitions = [p for p in partitions if p.flagged or p.quarantined or p.dead]
    partitions.sort(key=lambda p: (not p.flagged, -p.quarantined, p.name))
    groups, capped = error_groups(run.pk, state)
    options = BatchOptions(
        partitions=sorted(grid),
        page_types=page_types(run),
        rules=failed_rules(run),
        error_classes=errorclasses.present(run.pk),
        flagged=[p.name for p in partitions if p.flagged],
    )
    batches = RecoveryBatch.objects.filter(run=run).order_by("-pk")[:BATCHES_SHOWN]
    return QuarantinePage(
        state=state,
        partitions=partitions,
        groups=groups,
        capped=capped,
        sample_cap=SAMPLE_CAP,
        batch_options=options,
        # A running batch counts its tasks for its badge: one indexed query each.
        batches=[BatchRow(batch, figures.batch_outcome(batch)) for batch in batches],
        notes=list(TriageNote.objects.filter(run=run).order_by("-pk")[:NOTES_SHOWN]),
    )


def page_types(run: Run) -> list[str]:
    """The page types the run's spec declares."""
    return sorted((run.dataset.spec or {}).get("page_types", {}) or [])


def failed_rules(run: Run) -> list[str]:
    """The rules with a failed result in the run (a batch can rerun what each failed)."""
    failed = ValidationResult.objects.filter(run=run, passed=False)
    return sorted(set(failed.values_list("rule", flat=True)[:RULES_CAP]))


def error_groups(run_id: int, state: str) -> tuple[list[ErrorGroup], bool]:
    """Tasks in `state` grouped by error class and partition, from at most SAMPLE_CAP tasks.

    Returns (groups, capped). The (run, state, id) index yields the first SAMPLE_CAP ids; exact
    totals per partition are on the page from the counters.
    """
    # Aggregate over the capped range itself (a derived table with LIMIT), so the database
    # never joins back to the whole task table. ORDER BY id makes the sample the first ids and
    # makes the index the plan: without it PostgreSQL may pick a sequential scan "until 10,001
    # rows match" (seen at 1,000,000 tasks), which reads every earlier run's rows first.
    q = connection.ops.quote_name
    table, err, part = q(Task._meta.db_table), q("last_error_class"), q("partition")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {err}, {part}, COUNT(*), MIN(id) FROM ("
            f"SELECT id, {err}, {part} FROM {table} "
            "WHERE run_id = %s AND state = %s ORDER BY id LIMIT %s) capped "
            f"GROUP BY {err}, {part}",
            [run_id, state, SAMPLE_CAP + 1],
        )
        rows = [
            {"last_error_class": e, "partition": p, "n": n, "sample": s}
            for e, p, n, s in cursor.fetchall()
        ]
    capped = sum(r["n"] for r in rows) > SAMPLE_CAP
    groups: dict[str, ErrorGroup] = {}
    for row in rows:
        group = groups.setdefault(row["last_error_class"], ErrorGroup(row["last_error_class"]))
        group.tasks += row["n"]
        group.partitions[row["partition"]] = row["n"]
        if group.sample_task_id is None or row["sample"] < group.sample_task_id:
            group.sample_task_id = row["sample"]
    ordered = sorted(groups.values(), key=lambda g: (-g.tasks, g.error_class))[:50]
    samples = {g.sample_task_id for g in ordered}
    latest: dict[int, Attempt] = {}
    for attempt in Attempt.objects.filter(task_id__in=samples).order_by("task_id", "started_at"):
        latest[attempt.task_id] = attempt  # the last one per task wins
    for group in ordered:
        group.sample_attempt = latest.get(group.sample_task_id)
        group.partitions = dict(sorted(group.partitions.items(), key=lambda kv: -kv[1])[:20])
    return ordered, capped
