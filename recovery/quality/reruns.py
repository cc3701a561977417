"""Recovery batches: rerun only the affected scope (seed 002, "Rerun only the affected scope").

1. The run's manifest is frozen (its hash is recorded on the batch) and the last accepted
   dataset is retained: an accepted or published run stays available while the batch runs.
2. Tasks are selected by partition, page type, error class, failed validation rule or task id
   (AND across kinds, OR within a kind); only terminal tasks are selected. `selected_tasks` is that
   one query: the confirmation's count (`preview_recovery_batch`) and the batch both use it.
3. The reason and the new scraper version are recorded on the batch.
4. The batch lives under the original run; its task keys are the original ones.
5. `states.task.reset_for_batch` resets exactly those tasks: new attempts get new ids and link
   to the batch (the engine copies task.recovery_batch onto each Attempt).
6. Observations are upserted by their original keys (the engine's commit), and a value of a
   published run becomes a versioned correction (recovery.delivery.corrections).
7. When every task of the batch is terminal, the repaired partitions are re-marked and the whole
   run re-evaluated; the batch is completed and its tasks' final states are kept (`outcome`).
8. A reopened run becomes a candidate again and is promoted only after acceptance passes.

Guarantee 7: the observations of the partitions the batch does not touch are hashed when the
batch is created (`partition_hashes_before`); `untouched_unchanged(batch)` recomputes them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from recovery import audit
from recovery.models import Observation, RecoveryBatch, Run, Task, ValidationResult
from recovery.ops import logs
from recovery.outcomes import ErrorClass
from recovery.quality import figures, validation
from recovery.states import row_states
from recovery.states import run as run_states
from recovery.states.choices import RunState, TaskState
from recovery.states.task import TERMINAL, reset_for_batch

log = logging.getLogger(__name__)

REOPENABLE = (RunState.CANDIDATE, RunState.REJECTED)
# Task ids one selection may name: a list page's bulk action selects from pages of 50 rows, and
# the ids stay under SQLite's oldest limit of 999 parameters in one query.
MAX_TASK_IDS = 500
# Rules that judge rows: selecting one selects the tasks whose rows it failed.
DATA_RULE_KINDS = ("range", "pattern", "enum", "required", "partition_invalid_share")


class RerunError(ValueError):
    """A recovery batch that cannot be created (unknown run, empty selection, no reason...)."""


def partition_hash(run_id: int, partition: str) -> str:
    """SHA-256 over a partition's observations (key, payload hash, version, validation state),
    in key order: equal hashes mean the partition's accepted data did not change."""
    h = hashlib.sha256()
    rows = (
        Observation.objects.filter(run_id=run_id, partition=partition)
        .order_by("observation_key")
        .values_list("observation_key", "payload_hash", "version", "validation_state")
        .iterator(chunk_size=2000)
    )
    for key, payload_hash, version, state in rows:
        h.update(f"{key}\x1f{payload_hash}\x1f{version}\x1f{state}\x1e".encode())
    return h.hexdigest()


def partition_hashes(run_id: int, partitions: Iterable[str]) -> dict[str, str]:
    return {p: partition_hash(run_id, p) for p in sorted(partitions)}


def default_scraper_version(run: Run) -> str:
    """The version a recovery batch records unless told otherwise: the dataset spec's current
    one (a repaired scraper is usually why a batch is made, loaded as a new spec version just
    before), else the run's. The CLI's `rerun` and the dashboard's forms both start from it."""
    return str(run.dataset.spec.get("scraper_version") or run.scraper_version)


def _clean(values: Sequence[str] | None, what: str) -> list[str]:
    out = []
    for value in values or ():
        if not isinstance(value, str) or not value.strip():
            raise RerunError(f"{what}: empty value")
        out.append(value.strip())
    return out


def _present(run_id: int, column: str) -> set[str]:
    """Values of a column among the run's tasks (served by the run+state/error indexes)."""
    # `> ''`, not only `- {""}`: task_run_error_idx holds only tasks with an error class.
    values = Task.objects.filter(run_id=run_id, **{f"{column}__gt": ""})
    return set(values.order_by().values_list(column, flat=True).distinct())


def _task_ids(values: Sequence[int] | None) -> tuple[int, ...]:
    ids: list[int] = []
    for value in values or ():
        try:
            pk = int(value)
        except (TypeError, ValueError):
            raise RerunError(f"task {value!r} is not a task id") from None
        if pk < 1:
            raise RerunError(f"task {value!r} is not a task id")
        ids.append(pk)
    unique = tuple(sorted(set(ids)))
    if len(unique) > MAX_TASK_IDS:
        raise RerunError(f"select at most {MAX_TASK_IDS} tasks by id, not {len(unique)}")
    return unique


def _refuse_unknown(what: str, given: Sequence[str], valid: set[str]) -> None:
    """A typo (`--error-class bogus`) must not read as "nothing matches": name it, list the
    valid values."""
    unknown = [value for value in given if value not in valid]
    if unknown:
        raise RerunError(
            f"unknown {what} {unknown[0]!r}; valid: {', '.join(sorted(valid)) or '(none)'}"
        )


@dataclass(frozen=True)
class Selection:
    """What an operator selected: AND across kinds, OR within a kind."""

    partitions: tuple[str, ...] = ()
    page_types: tuple[str, ...] = ()
    error_classes: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    task_ids: tuple[int, ...] = ()  # rows selected on a task list (a bulk action)

    @classmethod
    def clean(
        cls,
        partitions: Sequence[str] = (),
        page_types: Sequence[str] = (),
        error_classes: Sequence[str] = (),
        rules: Sequence[str] = (),
        task_ids: Sequence[int] = (),
    ) -> Selection:
        selection = cls(
            tuple(_clean(partitions, "partition")),
            tuple(_clean(page_types, "page type")),
            tuple(_clean(error_classes, "error class")),
            tuple(_clean(rules, "rule")),
            _task_ids(task_ids),
        )
        if not (
            selection.partitions
            or selection.page_types
            or selection.error_classes
            or selection.rules
            or selection.task_ids
        ):
            raise RerunError("select tasks by partition, page type, error class, rule or task")
        return selection

    def stored(self) -> dict[str, list]:
        """The selection as the batch records it (`tasks` only when rows were selected)."""
        stored: dict[str, list] = {
            "partitions": list(self.partitions),
            "page_types": list(self.page_types),
            "error_classes": list(self.error_classes),
            "rules": list(self.rules),
        }
        if self.task_ids:
            stored["tasks"] = list(self.task_ids)
        return stored


def selected_tasks(run: Run, selection: Selection) -> QuerySet[Task]:
    """The run's settled tasks a batch with this selection resets: the one query both the
    confirmation's count and the batch itself use. Raises RerunError on a selection that
    names something the run does not have."""
    query = Q(run_id=run.pk, state__in=TERMINAL)
    if selection.task_ids:
        # Ids, not keys: a row picked on a list. One named outside the run is refused, never
        # read as "nothing matches" (a tampered or stale form).
        found = set(
            Task.objects.filter(run_id=run.pk, pk__in=selection.task_ids).values_list(
                "pk", flat=True
            )
        )
        missing = [pk for pk in selection.task_ids if pk not in found]
        if missing:
            raise RerunError(f"task {missing[0]} is not in run {run.pk}")
        query &= Q(pk__in=selection.task_ids)
    if selection.partitions:
        known = set(
            Task.objects.filter(run_id=run.pk, partition__in=selection.partitions)
            .order_by()
            .values_list("partition", flat=True)
            .distinct()
        )
        unknown = sorted(set(selection.partitions) - known)
        if unknown:
            raise RerunError(f"partition {unknown[0]!r} is not in run {run.pk}")
        query &= Q(partition__in=selection.partitions)
    if selection.page_types:
        _refuse_unknown(
            "page type",
            selection.page_types,
            set(run.dataset.spec.get("page_types", {})) | _present(run.pk, "page_type"),
        )
        query &= Q(page_type__in=selection.page_types)
    if selection.error_classes:
        _refuse_unknown(
            "error class",
            selection.error_classes,
            {str(c) for c in ErrorClass} | _present(run.pk, "last_error_class"),
        )
        query &= Q(last_error_class__in=selection.error_classes)
    if selection.rules:
        spec_rules = {r["name"] for r in run.dataset.spec.get("rules", [])}
        for rule in selection.rules:
            if rule not in spec_rules:
                raise RerunError(f"rule {rule!r} is not a rule of dataset {run.dataset.name}")
        failing = set(
            ValidationResult.objects.filter(run_id=run.pk, rule__in=selection.rules, passed=False)
            .exclude(partition="")
            .values_list("partition", flat=True)
        )
        if not failing:
            raise RerunError(
                f"rule {', '.join(selection.rules)}: no partition of run {run.pk} fails it"
            )
        query &= Q(partition__in=failing)
        kinds = {r["name"]: r["kind"] for r in run.dataset.spec.get("rules", [])}
        if all(kinds[rule] in DATA_RULE_KINDS for rule in selection.rules):
            # A rule that judges rows selects the tasks whose rows it failed (seed 002: "those
            # task keys"), not the partition's consent pages or 404s, which no repaired
            # selector recovers. Coverage and outcome rules keep the whole failing partition.
            # A row failed a data rule when it was judged invalid or is held: its partition is
            # quarantined, whatever its verdict (or an older evaluation stored it as held, which
            # row_states.state_counts counts held too). An unjudged row has failed nothing yet.
            failed = Q(validation_state__in=(row_states.INVALID, row_states.HELD)) | Q(
                partition__in=row_states.held_partitions(run.pk)
            )
            failed_rows = Observation.objects.filter(failed, run_id=run.pk, partition__in=failing)
            query &= Q(
                state=TaskState.COMMITTED,
                pk__in=failed_rows.values("source_task_id"),
            )
    return Task.objects.filter(query).order_by()


@dataclass
class Preview:
    """What a batch with this selection would reset now (the confirmation page)."""

    tasks: int
    by_partition: dict[str, int]
    by_state: dict[str, int]
    # With a selection of task ids, the selected tasks (at most LISTED of each), so the
    # confirmation names what it resets and what it leaves alone (not settled).
    listed: list[Task] = field(default_factory=list)
    left: list[Task] = field(default_factory=list)


LISTED = 200


def preview_recovery_batch(
    run_id: int,
    *,
    partitions: Sequence[str] = (),
    page_types: Sequence[str] = (),
    error_classes: Sequence[str] = (),
    rules: Sequence[str] = (),
    task_ids: Sequence[int] = (),
) -> Preview:
    """Count the tasks create_recovery_batch would reset, by the same query; changes nothing."""
    selection = Selection.clean(partitions, page_types, error_classes, rules, task_ids)
    run = Run.objects.select_related("dataset").filter(pk=run_id).first()
    if run is None:
        raise RerunError(f"run {run_id} does not exist")
    by_partition: dict[str, int] = {}
    by_state: dict[str, int] = {}
    chosen = selected_tasks(run, selection)
    rows = chosen.values_list("partition", "state").annotate(n=Count("pk"))
    for partition, state, n in rows:
        by_partition[partition] = by_partition.get(partition, 0) + n
        by_state[state] = by_state.get(state, 0) + n
    listed: list[Task] = []
    left: list[Task] = []
    if selection.task_ids:
        shown = ("pk", "url", "state", "partition", "last_error_class")
        listed = list(chosen.only(*shown).order_by("pk")[:LISTED])
        others = Task.objects.filter(run_id=run.pk, pk__in=selection.task_ids)
        left = list(others.exclude(pk__in=chosen.values("pk")).only(*shown).order_by("pk")[:LISTED])
    return Preview(
        tasks=sum(by_state.values()),
        by_partition=by_partition,
        by_state=by_state,
        listed=listed,
        left=left,
    )


def create_recovery_batch(
    run_id: int,
    *,
    partitions: Sequence[str] = (),
    page_types: Sequence[str] = (),
    error_classes: Sequence[str] = (),
    rules: Sequence[str] = (),
    task_ids: Sequence[int] = (),
    reason: str,
    scraper_version: str,
    actor: str,
    expected_tasks: int | None = None,
    from_archive: bool = False,
) -> RecoveryBatch:
    """Create a recovery batch for the selected terminal tasks of a run and reset them.

    `expected_tasks` is the count the operator confirmed: if the selection matches a different
    number of tasks now (tasks settled meanwhile), nothing is created. `task_ids` selects rows
    picked on a task list (a bulk rerun): the same batch, audited the same way.
    `from_archive`: re-extract each page from the page archive where it is kept, with no
    request to the site; a page not kept (missing, expired) is fetched (recovery.archive).
    """
    selection = Selection.clean(partitions, page_types, error_classes, rules, task_ids)
    reason = (reason or "").strip()
    scraper_version = (scraper_version or "").strip()
    if not reason:
        raise RerunError("a recovery batch needs a reason")
    if not scraper_version:
        raise RerunError("a recovery batch records the repaired scraper version")
    if len(scraper_version) > 64:
        raise RerunError("scraper version: at most 64 characters")

    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("dataset").filter(pk=run_id).first()
        if run is None:
            raise RerunError(f"run {run_id} does not exist")
        selected = list(selected_tasks(run, selection).values_list("pk", "partition"))
        if not selected:
            raise RerunError(f"no terminal task of run {run.pk} matches the selection")
        if expected_tasks is not None and expected_tasks != len(selected):
            raise RerunError(
                f"the selection now matches {len(selected)} tasks, not the {expected_tasks} "
                "you confirmed; nothing was reset, review it again"
            )
        touched = {p for _pk, p in selected}
        all_partitions = set(
            Observation.objects.filter(run_id=run.pk)
            .order_by()
            .values_list("partition", flat=True)
            .distinct()
        )

        # Step 1: freeze the manifest (the run's task set is what the batch reruns).
        now = timezone.now()
        if run.manifest_frozen_at is None:
            Run.objects.filter(pk=run.pk, manifest_frozen_at=None).update(manifest_frozen_at=now)
        # Step 3: the repaired version. The engine stamps attempts and (changed) observations
        # with the run's scraper version, so the batch's new attempts record the repaired one
        # while untouched observations keep the version that produced them.
        Run.objects.filter(pk=run.pk).update(scraper_version=scraper_version)
        batch = RecoveryBatch.objects.create(
            run=run,
            selection={**selection.stored(), "touched_partitions": sorted(touched)},
            reason=reason,
            scraper_version=scraper_version,
            created_by=actor,
            task_count=len(selected),
            manifest_sha256=run.manifest_sha256,
            partition_hashes_before=partition_hashes(run.pk, all_partitions - touched),
            from_archive=bool(from_archive),
        )
        # Their crash budgets are reset with them (worker_crash_loop pages would otherwise be
        # quarantined again by the next claim, unfetched): the audit entry says how many.
        crashed = selected_tasks(run, selection).filter(crash_count__gt=0).count()
        moved = reset_for_batch(run.pk, [pk for pk, _p in selected], batch.pk)
        if moved != len(selected):  # a task moved under us despite the lock: do nothing
            raise RerunError("the selected tasks changed meanwhile; try again")
        reopened = False
        if run.acceptance_state in REOPENABLE:
            reopened = run_states.move(
                run.pk,
                run.acceptance_state,
                RunState.COLLECTING,
                state_reason=f"recovery batch {batch.pk}: {reason}",
            )
        audit.record(
            actor,
            "create_recovery_batch",
            batch,
            reason,
            run=run.pk,
            tasks=len(selected),
            selection=batch.selection,
            scraper_version=scraper_version,
            reopened=reopened,
            crash_counts_reset=crashed,
            from_archive=bool(from_archive),
        )
    return batch


def recovered(batch: RecoveryBatch) -> tuple[int, int]:
    """(recovered, total) tasks of a batch, as recovery.quality.figures defines them (the demo's
    checklist and the batch page's badge say the same "N of M recovered")."""
    outcome = figures.batch_outcome(batch)
    return outcome.recovered, outcome.total


def untouched_unchanged(batch: RecoveryBatch) -> dict[str, bool]:
    """{partition: True if its observations hash as they did when the batch was created}."""
    now = partition_hashes(batch.run_id, batch.partition_hashes_before)
    return {p: now[p] == before for p, before in batch.partition_hashes_before.items()}


def complete_batch(batch_id: int) -> bool:
    """Revalidate and complete a batch whose tasks are all terminal; True if it completed."""
    batch = RecoveryBatch.objects.filter(pk=batch_id, state=RecoveryBatch.State.RUNNING).first()
    if batch is None:
        return False
    if Task.objects.filter(recovery_batch_id=batch.pk).exclude(state__in=TERMINAL).exists():
        return False
    touched = set(batch.selection.get("touched_partitions", []))
    # Step 7: re-mark the repaired partitions, recompute the run-level checks (outside a
    # transaction: evaluate keeps its own write transaction short). Two processes may both
    # evaluate; the result is the same and only one completes the batch below.
    result = validation.evaluate(batch.run_id, mark=touched)
    with transaction.atomic():
        outcome = figures.outcome_counts(batch.pk)
        done = RecoveryBatch.objects.filter(pk=batch.pk, state=RecoveryBatch.State.RUNNING).update(
            state=RecoveryBatch.State.COMPLETED, completed_at=timezone.now(), outcome=outcome
        )
        if not done:
            return False
        unchanged = untouched_unchanged(batch)
        audit.record(
            "system",
            "complete_recovery_batch",
            batch,
            "all batch tasks terminal",
            run=batch.run_id,
            passed=result.passed,
            failures=result.failures,
            released=result.released,
            quarantined=result.quarantined,
            untouched_unchanged=all(unchanged.values()),
            outcome=outcome,
        )
        transaction.on_commit(
            lambda: logs.event(
                log,
                "batch_completed",
                "recovery batch %s of run %s completed: %s",
                batch.pk,
                batch.run_id,
                outcome,
                batch=batch.pk,
                run=batch.run_id,
                passed=result.passed,
            )
        )
    return True


def complete_ready_batches() -> int:
    """Complete every running batch whose tasks are terminal; returns how many completed."""
    running = list(
        RecoveryBatch.objects.filter(state=RecoveryBatch.State.RUNNING).values_list("pk", flat=True)
    )
    return sum(1 for pk in running if complete_batch(pk))
