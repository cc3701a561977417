"""The hot path's tables: tasks, their attempts, the observations they commit (with the
superseded versions corrections keep) and the task counters every move appends to.

The `run` of Attempt, Observation and TaskCountDelta is a copy without a database constraint:
RUN_COPY above recovery.models.runs.Run says why.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Substr
from django.utils import timezone

from recovery.models.runs import RecoveryBatch, Run
from recovery.states.choices import CLAIMABLE_ORDER, TaskState


class HttpStatusKey(models.Func):
    """COALESCE(last_http_status, 0): a task's last HTTP status as a sort key, 0 for none yet.

    A keyset cursor cannot step over NULL (NULL compares as unknown, and the two databases put
    it at opposite ends), so the sort and task_run_http_idx read this expression instead of the
    column. The 0 is written into the SQL, not passed as a parameter: the query's expression is
    then the index's own, which is what lets the database read the index for it.
    """

    template = "COALESCE(%(expressions)s, 0)"
    arity = 1
    output_field = models.IntegerField()


class Task(models.Model):
    """One logical unit of work, stable across retries (task_key never has an attempt number)."""

    class Discovery(models.TextChoices):
        MANIFEST = "manifest"
        LINK = "link"
        CURSOR = "cursor"
        OFFSET = "offset"
        DRIFT = "drift"  # found only by re-reading an offset listing's head (recovery.fetch.drift)
        SITEMAP = "sitemap"  # a sitemap file, or a URL one listed (recovery.fetch.sitemaps)

    # No single-column index on run: every claim and commit rewrites each index of this table
    # (the state columns change, so updates are never HOT), and run-led composite indexes
    # below already serve "tasks of a run". parent has a partial index (task_parent_idx).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tasks", db_index=False)
    task_key = models.CharField(max_length=64, unique=True)
    url = models.TextField()
    page_type = models.CharField(max_length=64, default="page")
    partition = models.CharField(max_length=200, default="", blank=True)
    priority = models.SmallIntegerField(default=0)
    discovery = models.CharField(
        max_length=16, choices=Discovery.choices, default=Discovery.MANIFEST
    )
    parent = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="children",
        db_index=False,
    )
    depth = models.PositiveSmallIntegerField(default=0)
    # Navigation state for cursor/offset pagination (e.g. {"cursor": "abc"}), stored with the
    # page that produced it so a restart resumes from the last accepted page.
    navigation = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    # Attempts lost with their worker (an expired lease taken over): counted apart from the
    # retry budget (attempt_count includes them), against SALVAGE_CRASH_BUDGET.
    crash_count = models.PositiveIntegerField(default=0, db_default=0)
    # Claims that ended deferred (Outcome.deferred: the host's robots.txt unreachable, its
    # politeness slot far): counted in attempt_count, never against the retry budgets.
    deferred_count = models.PositiveIntegerField(default=0, db_default=0)
    # When the task may next be claimed. A claim sets it to lease_until, so "leased with an
    # expired lease" and "pending and due" are the same index predicate (no reaper needed).
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # Fencing token: bumped by every claim; heartbeat and commit must present the current one.
    lease_token = models.BigIntegerField(default=0)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error_class = models.CharField(max_length=32, blank=True)
    last_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # NULL for every task no rerun batch touched: indexed only where set (task_batch_idx).
    recovery_batch = models.ForeignKey(
        RecoveryBatch,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="tasks",
        db_index=False,
    )
    # The provider job that holds this task while it is `remote` (NULL in every other state:
    # task_remote_job_state_ck). Indexed only where set: few tasks are remote at once.
    remote_job = models.ForeignKey(
        "RemoteJob",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="held_tasks",
        db_index=False,
    )
    created_at = models.DateTimeField(default=timezone.now)
    state_changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # The claim: WHERE state IN (...) AND next_attempt_at <= now
            # ORDER BY priority DESC, next_attempt_at — an index scan, never a table scan.
            models.Index(
                models.F("priority").desc(),
                "next_attempt_at",
                name="task_claim_idx",
                # Remote tasks are not claimable, so they are not in this index.
                condition=Q(state__in=[s.value for s in CLAIMABLE_ORDER]),
            ),
            # A rerun batch's tasks (its progress, its completion, SET_NULL when it is deleted).
            # Partial, as the next one: a full FK index wrote a NULL entry per claim and commit.
            models.Index(
                fields=["recovery_batch"],
                name="task_batch_idx",
                condition=Q(recovery_batch__isnull=False),
            ),
            # "The tasks this job holds" (its import, an operator's resolution).
            models.Index(
                fields=["remote_job"],
                name="task_remote_job_idx",
                condition=Q(remote_job__isnull=False),
            ),
            # id last: a run's tasks in one state in id order (the quarantine list, a state
            # filter on a run's tasks) are one range scan, however many tasks the run has.
            models.Index(fields=["run", "state", "id"], name="task_run_state_idx"),
            # The run page's inventory-drift figure (recovery.quality.figures): only drift rows are
            # indexed, so it costs writes nothing else and the count never scans the run.
            models.Index(fields=["run"], name="task_run_drift_idx", condition=Q(discovery="drift")),
            # The run page's sitemap progress (recovery.quality.figures): a run's sitemap files, few
            # beside its pages, so the index costs the pages' claims and commits nothing.
            models.Index(
                fields=["run", "state"],
                name="task_run_sitemap_idx",
                condition=Q(page_type="@sitemap"),
            ),
            # id last, as above: a partition's tasks in (state, task) order for its list.
            models.Index(
                fields=["run", "partition", "state", "id"], name="task_run_part_state_idx"
            ),
            # The error classes present in a run (dashboard.errorclasses' skip scan) and the
            # tasks of one class. Partial: a task with no error class (nearly every committed
            # one) writes no entry on its claim and its commit (neither is a HOT update).
            # Queries say `last_error_class > ''` (or name a class) so the index serves them.
            models.Index(
                fields=["run", "last_error_class"],
                name="task_run_error_idx",
                condition=Q(last_error_class__gt=""),
            ),
            # Deleting a task makes the database look for children naming it as parent; with
            # no index that is a scan of the table per deleted row (quadratic: 97 s to delete
            # 20,000 tasks on SQLite, 0.4 s with this index). Partial, so manifest tasks (no
            # parent) cost no index write on claim and commit.
            models.Index(
                fields=["parent"],
                name="task_parent_idx",
                condition=Q(parent__isnull=False),
            ),
            # A run's task list in URL order and URL-prefix search (dashboard.lists.UrlKey is
            # the expression every query uses). Declared so SQLite's table rebuilds keep it; on
            # PostgreSQL migration 0006 built it with COLLATE "C" (byte order, which lets one
            # index serve both ORDER BY and a prefix range) and migration 0011 keeps that one.
            models.Index(
                models.F("run"),
                Substr("url", 1, 500),
                models.F("id"),
                name="task_run_url_idx",
            ),
            # A run's task list sorted by attempts, last HTTP status, error class or last state
            # change (dashboard.lists.TASKS): id last, so each order and its keyset cursor is
            # one range scan of the run's entries from the cursor on, however big the run. The
            # price: every claim and commit writes an entry in each (bench/README.md,
            # "Dashboard pages").
            models.Index(fields=["run", "attempt_count", "id"], name="task_run_attempts_idx"),
            models.Index(
                models.F("run"),
                HttpStatusKey("last_http_status"),
                models.F("id"),
                name="task_run_http_idx",
            ),
            models.Index(fields=["run", "last_error_class", "id"], name="task_run_error_sort_idx"),
            models.Index(fields=["run", "state_changed_at", "id"], name="task_run_changed_idx"),
        ]
        constraints = [
            # A remote task names its job; no other task does (the import fences on the job).
            models.CheckConstraint(
                condition=Q(state=TaskState.REMOTE, remote_job__isnull=False)
                | (~Q(state=TaskState.REMOTE) & Q(remote_job__isnull=True)),
                name="task_remote_job_state_ck",
            )
        ]

    def __str__(self) -> str:
        return f"{self.url} [{self.state}]"


class Attempt(models.Model):
    """One execution of a task, or one submission to a remote API. Never deleted."""

    class Outcome(models.TextChoices):
        RUNNING = "running"  # written before an outbound remote submission
        COMMITTED = "committed"
        RETRY = "retry"
        QUARANTINED = "quarantined"
        GONE = "gone"
        DEAD = "dead"
        LOST_LEASE = "lost_lease"  # the commit matched no current lease and was rolled back
        # Not an attempt at the page: the host asked us to wait (robots.txt unreachable, its
        # politeness slot far); the task waits in retry_wait without spending its budgets.
        DEFERRED = "deferred"
        # A remote job's own attempt is its submission, one per job (RemoteJob.attempt), never
        # an execution of a task: each task's outcome is its own attempt, written at import.
        SUBMITTED = "submitted"  # a remote job was created for this attempt
        UNKNOWN = "unknown"  # the remote submission's outcome is ambiguous
        REFUSED = "refused"  # the provider refused the submission: certainly nothing created

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # task and run are served by the (task, started_at) and (run, ...) composite indexes; a
    # single-column copy would only add a write to every attempt insert on the hot path.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="attempts", db_index=False
    )
    # No database constraint (RUN_COPY): the task's run, copied by the commit.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="attempts", db_index=False, db_constraint=False
    )
    # Indexed only where set (attempt_batch_idx), as Task.recovery_batch.
    recovery_batch = models.ForeignKey(
        RecoveryBatch,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="attempts",
        db_index=False,
    )
    # An operator's replacement of an ambiguous attempt points at the original.
    replaces = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="replacements",
        db_index=False,
    )
    lease_token = models.BigIntegerField(default=0)
    worker = models.CharField(max_length=100, blank=True)
    scraper_version = models.CharField(max_length=64, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    error_class = models.CharField(max_length=32, blank=True)
    error_detail = models.TextField(blank=True)
    # Diagnostic artefact: {"status", "headers" (no secrets), "body_excerpt"} or {"file": ref}.
    artefact = models.JSONField(null=True, blank=True)
    payload_hash = models.CharField(max_length=64, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["task", "started_at"], name="attempt_task_time_idx"),
            # Only attempts of a rerun batch (SET_NULL when it is deleted): none of a first pass.
            models.Index(
                fields=["recovery_batch"],
                name="attempt_batch_idx",
                condition=Q(recovery_batch__isnull=False),
            ),
            models.Index(fields=["run", "outcome"], name="attempt_run_outcome_idx"),
            # Dashboard: throughput and the per-minute chart read one run's recent attempts
            # as an index range (run, finished_at), never the run's whole attempt history.
            models.Index(fields=["run", "finished_at", "outcome"], name="attempt_run_finished_idx"),
        ]


class Observation(models.Model):
    """One entity's state in one window. Upserted by observation_key, never appended twice."""

    class Validation(models.TextChoices):
        PENDING = "pending"
        VALID = "valid"
        INVALID = "invalid"
        HELD = "held"  # its partition is quarantined: never exported or published

    # "observations of a run" uses the run-led composite indexes below. No database
    # constraint (RUN_COPY): the source task's run, copied by the commit.
    run = models.ForeignKey(
        Run,
        on_delete=models.CASCADE,
        related_name="observations",
        db_index=False,
        db_constraint=False,
    )
    observation_key = models.CharField(max_length=64, unique=True)
    entity_key = models.CharField(max_length=500)
    window = models.CharField(max_length=64)
    partition = models.CharField(max_length=200, default="", blank=True)
    payload = models.JSONField()
    payload_hash = models.CharField(max_length=64)
    source_task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="observations")
    # A copy of source_task.task_key (which never changes), written by the commit paths with
    # source_task so an export reads it without a recovery_task probe per row. NULL = not
    # stored (rows written before it, or by hand): readers then look the task key up. NULL,
    # not "", so "not stored" cannot be mistaken for a value.
    source_task_key = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    source_attempt = models.ForeignKey(
        Attempt, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    scraper_version = models.CharField(max_length=64, blank=True)
    # The row's own verdict (recovery.verdicts), judged by the commit that wrote it or by an
    # evaluation: valid, invalid, or pending (not judged yet). Held is not stored here: a row
    # is held when its partition is quarantined (recovery.states.row_states).
    validation_state = models.CharField(
        max_length=16, choices=Validation.choices, default=Validation.PENDING
    )
    # What the row failed, as bits (quality.verdicts.Rules), and the digest of the rules that
    # judged it; NULL / "": not judged. A row judged by other rules than its run's current
    # ones is judged again by the next evaluation.
    verdict = models.BigIntegerField(null=True, blank=True)
    verdict_rules = models.CharField(max_length=16, blank=True, default="", db_default="")
    # Bumped when a correction supersedes a published value (history in ObservationVersion).
    version = models.PositiveIntegerField(default=1)
    observed_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["run", "partition"], name="obs_run_partition_idx"),
            models.Index(fields=["run", "validation_state", "id"], name="obs_run_valid_idx"),
        ]


class ObservationVersion(models.Model):
    """A superseded value of a published observation (corrections keep history)."""

    observation = models.ForeignKey(Observation, on_delete=models.CASCADE, related_name="history")
    version = models.PositiveIntegerField()
    payload = models.JSONField()
    payload_hash = models.CharField(max_length=64)
    source_attempt = models.ForeignKey(
        Attempt, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    superseded_at = models.DateTimeField(default=timezone.now)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["observation", "version"], name="obs_version_uniq")
        ]


class TaskCountDelta(models.Model):
    """Append-only task-state counters per (run, partition, state).

    Dashboards sum these instead of counting a million task rows per request. Every task
    transition adds rows in its own transaction (recovery.counters); compaction folds them.
    Append-only, so concurrent committers never contend on a counter row.
    """

    # No index of its own: taskcount_idx leads with run (every read, compaction and the
    # cascade from Run use it), and each delta row inserted would write one more entry.
    # No database constraint (RUN_COPY): the moved tasks' run, copied by the claim and commit.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    partition = models.CharField(max_length=200, default="", blank=True)
    state = models.CharField(max_length=16, choices=TaskState.choices)
    delta = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["run", "partition", "state"], name="taskcount_idx")]
