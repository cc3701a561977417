"""The recovery data model (seed 002's minimum recovery schema, plus remote jobs).

States change only through recovery.states.* (guarded UPDATEs); never assign `.state` and save.
Identities are enforced by the database: unique task_key, observation_key, (job, item_index).
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Substr
from django.utils import timezone

from recovery.liveness import WorkerKind
from recovery.states.delivery import DeliveryState
from recovery.states.remote_job import RemoteJobState
from recovery.states.run import RunState
from recovery.states.task import CLAIMABLE_ORDER, TaskState


class Dataset(models.Model):
    """What is collected: loaded from a spec file (see recovery.specs)."""

    name = models.SlugField(max_length=100, unique=True)
    spec = models.JSONField()
    spec_sha256 = models.CharField(max_length=64)
    provider = models.CharField(max_length=32, default="direct")
    auto_accept = models.BooleanField(default=False)
    lease_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_attempts = models.PositiveIntegerField(default=5)
    max_elapsed_seconds = models.PositiveIntegerField(default=6 * 3600)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


# RUN_COPY: Attempt.run, Observation.run and TaskCountDelta.run are copies of a task's run,
# written by the claim and the commit from the task row they move (Task.run is a database
# foreign key). A database foreign key on the copies made every row the hot path inserts lock
# the one run row FOR KEY SHARE at commit: 100+ checks per batch, and a MultiXact whenever two
# workers commit at once (bench/README.md, "Claim -> commit"). Django's CASCADE still deletes
# them with their run (no product path deletes one); tests/db/test_run_copies.py holds the
# copies to their tasks' runs.
class Run(models.Model):
    """One intended collection (dataset + window) and its candidate dataset."""

    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="runs")
    window = models.CharField(max_length=64)
    scraper_version = models.CharField(max_length=64, default="1")
    schema_version = models.CharField(max_length=64, default="1")
    acceptance_state = models.CharField(
        max_length=16, choices=RunState.choices, default=RunState.COLLECTING
    )
    state_reason = models.TextField(blank=True)
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    manifest_frozen_at = models.DateTimeField(null=True, blank=True)
    # Logical tasks in the run (manifest + discovered); coverage divides by this, never attempts.
    task_total = models.PositiveIntegerField(default=0)
    # Why coverage is known to be incomplete (e.g. a search job stopped on token_cap).
    coverage_note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    candidate_at = models.DateTimeField(null=True, blank=True)
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.CharField(max_length=150, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "window"], name="run_dataset_window_uniq")
        ]
        indexes = [models.Index(fields=["dataset", "acceptance_state"], name="run_ds_state_idx")]
        permissions = [
            ("triage_run", "Triage quarantine and reconcile items (notes, reviewed marks)"),
            ("resolve_reconcile", "Resolve reconcile items (attach job id, replacement, dismiss)"),
            ("create_recovery_batch", "Create recovery batches"),
            ("accept_run", "Accept, reject and publish runs"),
            ("retry_delivery", "Retry and look up outbox deliveries"),
            ("export_dataset", "View and download accepted datasets"),
            ("view_audit", "View the audit log"),
            ("upload_dataset", "Upload dataset specs and manifests (create runs)"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name}@{self.window}"


class RecoveryBatch(models.Model):
    """A targeted rerun of selected task keys under the original run."""

    class State(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="recovery_batches")
    # {"partitions": [...], "page_types": [...], "error_classes": [...], "rules": [...]}
    selection = models.JSONField(default=dict)
    reason = models.TextField()
    scraper_version = models.CharField(max_length=64)
    created_by = models.CharField(max_length=150, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    task_count = models.PositiveIntegerField(default=0)
    manifest_sha256 = models.CharField(max_length=64, blank=True)
    # Hashes of the untouched partitions' observations when the batch was created (guarantee 7).
    partition_hashes_before = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # The batch's tasks by final state when it completed ({"committed": 40, "dead": 2}):
    # recovered / still failing / dead stay what they were even if a later batch resets them.
    outcome = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "recovery batches"

    def __str__(self) -> str:
        return f"batch {self.pk} of run {self.run_id}"


class Task(models.Model):
    """One logical unit of work, stable across retries (task_key never has an attempt number)."""

    class Discovery(models.TextChoices):
        MANIFEST = "manifest"
        LINK = "link"
        CURSOR = "cursor"
        OFFSET = "offset"
        DRIFT = "drift"  # found only by re-reading an offset listing's head (recovery.drift)
        SITEMAP = "sitemap"  # a sitemap file, or a URL one listed (recovery.sitemaps)

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
            # The run page's inventory-drift figure (recovery.figures): only drift rows are
            # indexed, so it costs writes nothing else and the count never scans the run.
            models.Index(fields=["run"], name="task_run_drift_idx", condition=Q(discovery="drift")),
            # The run page's sitemap progress (recovery.figures): a run's sitemap files, few
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
    # is held when its partition is quarantined (recovery.row_states).
    validation_state = models.CharField(
        max_length=16, choices=Validation.choices, default=Validation.PENDING
    )
    # What the row failed, as bits (recovery.verdicts.Rules), and the digest of the rules that
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


class OutboxEvent(models.Model):
    """A publication/delivery event written in the same transaction as the change it announces."""

    class Kind(models.TextChoices):
        ACCEPTED = "accepted"
        PUBLISHED = "published"
        CORRECTION = "correction"
        MEDIA_HANDOFF = "media_handoff"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, null=True, blank=True, related_name="outbox_events"
    )
    event_type = models.CharField(max_length=32, choices=Kind.choices)
    payload = models.JSONField(default=dict)
    destination = models.CharField(max_length=300, blank=True)
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.UNSENT
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="outbox_due_idx"),
            # The deliveries list, newest first (dashboard.lists.DELIVERIES).
            models.Index(fields=["created_at", "id"], name="outbox_created_idx"),
        ]


class RemoteJob(models.Model):
    """A submission to an asynchronous provider, persisted *before* the create call."""

    class Kind(models.TextChoices):
        BATCH = "batch"
        CRAWL = "crawl"
        SEARCH = "search"
        MEDIA = "media"
        CLOUD = "cloud"

    # Our attempt id exists before anything is sent (seed 003: record the attempt first).
    attempt = models.OneToOneField(Attempt, on_delete=models.PROTECT, related_name="remote_job")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="remote_jobs")
    provider = models.CharField(max_length=32)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # What was asked for: task keys/URLs, or a reference to where the input list is stored.
    input_ref = models.JSONField(default=dict)
    request_options = models.JSONField(default=dict)  # sanitised: never a credential
    idempotency_key = models.CharField(max_length=100, blank=True)
    # NULL, not "": the id is unknown until the provider answers (and the unique index skips it).
    provider_job_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    state = models.CharField(
        max_length=16, choices=RemoteJobState.choices, default=RemoteJobState.CREATED
    )
    submitted_at = models.DateTimeField(null=True, blank=True)
    next_poll_at = models.DateTimeField(null=True, blank=True)
    poll_deadline = models.DateTimeField(null=True, blank=True)
    last_polled_at = models.DateTimeField(null=True, blank=True)
    poll_failures = models.PositiveIntegerField(default=0)
    # Polls are claimed with the same fenced lease as tasks, so two workers never poll one job.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_token = models.BigIntegerField(default=0)
    credits_used = models.PositiveIntegerField(default=0)
    stopped_reason = models.CharField(max_length=64, blank=True)
    last_response = models.JSONField(null=True, blank=True)  # sanitised
    # Stable object reference of a delivered result (media), and its handoff state.
    result_ref = models.CharField(max_length=500, blank=True)
    handoff_state = models.CharField(
        max_length=16, choices=DeliveryState.choices, blank=True, default=""
    )
    replaces = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="replacements"
    )
    resolution = models.TextField(blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "provider_job_id"],
                condition=Q(provider_job_id__isnull=False),
                name="remotejob_provider_job_uniq",
            )
        ]
        indexes = [models.Index(fields=["state", "next_poll_at"], name="remotejob_due_idx")]


class RemoteJobItem(models.Model):
    """One result entry of a remote job, committed idempotently by (job, item_index)."""

    job = models.ForeignKey(RemoteJob, on_delete=models.CASCADE, related_name="items")
    item_index = models.PositiveIntegerField()
    url = models.TextField(blank=True)
    status = models.CharField(max_length=32)
    task = models.ForeignKey(Task, on_delete=models.SET_NULL, null=True, blank=True)
    observation = models.ForeignKey(Observation, on_delete=models.SET_NULL, null=True, blank=True)
    retried_in = models.ForeignKey(
        RemoteJob, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "item_index"], name="remotejobitem_uniq")
        ]


class WebhookReceipt(models.Model):
    """A provider notification as received (a hint only: status is confirmed by the API)."""

    provider = models.CharField(max_length=32)
    provider_job_id = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=32, blank=True)
    body = models.JSONField(default=dict)  # sanitised
    job = models.ForeignKey(RemoteJob, on_delete=models.SET_NULL, null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)


class RunPartition(models.Model):
    """A partition (e.g. one retailer) of a run: quarantine flag and triage marks."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=200)
    quarantined = models.BooleanField(default=False)
    quarantine_reason = models.TextField(blank=True)
    reviewed_by = models.CharField(max_length=150, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    # Early (provisional) quarantine while the run collects (recovery.provisional): the sample
    # read so far in commit order, its invalid counts per partition rule, and the flag.
    sample_size = models.PositiveIntegerField(default=0)
    sample_invalid = models.JSONField(default=dict, blank=True)
    sample_last_id = models.BigIntegerField(default=0)
    provisional_reason = models.TextField(blank=True)
    provisional_at = models.DateTimeField(null=True, blank=True)
    # The partition's observations when an evaluation last decided its hold: their number and
    # a checksum of their updated_at (recovery.validation). A partition whose rows changed
    # since is decided again even when the evaluation re-marks only repaired partitions.
    marked_rows = models.BigIntegerField(null=True, blank=True)
    marked_sum = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="runpartition_uniq")]


class ValidationResult(models.Model):
    """The latest result of one rule for a run (partition "" = the whole run)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="validation_results")
    rule = models.CharField(max_length=100)
    partition = models.CharField(max_length=200, default="", blank=True)
    passed = models.BooleanField()
    value = models.FloatField(null=True, blank=True)
    threshold = models.FloatField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    evaluated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "rule", "partition"], name="validationresult_uniq"
            )
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


class WorkerHeartbeat(models.Model):
    """Each worker process's last sign of life (dashboard: workers and leases)."""

    worker = models.CharField(max_length=100, unique=True)
    hostname = models.CharField(max_length=200, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    claimed = models.PositiveBigIntegerField(default=0)
    committed = models.PositiveBigIntegerField(default=0)
    # A database default: recovery.leases creates rows with raw SQL that names no kind.
    kind = models.CharField(max_length=16, choices=WorkerKind.choices, blank=True, db_default="")
    stopped_at = models.DateTimeField(null=True, blank=True)  # a clean exit (liveness.goodbye)

    class Meta:
        indexes = [
            # The alive count (/metrics, the workers page): last_seen within a threshold.
            models.Index(fields=["last_seen"], name="heartbeat_last_seen_idx"),
            # The workers list, newest first (dashboard.lists.WORKERS).
            models.Index(fields=["started_at", "id"], name="heartbeat_started_idx"),
        ]


class TriageNote(models.Model):
    """An operator's note on a run, partition or task."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="notes")
    partition = models.CharField(max_length=200, blank=True)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, null=True, blank=True)
    author = models.CharField(max_length=150)
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)


class AuditEntry(models.Model):
    """Who did what, when and why (every operator and admin action)."""

    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=100)
    reason = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        verbose_name_plural = "audit entries"


class Schedule(models.Model):
    """A recurring collection of a dataset: one run per window, created by the dispatcher
    (recovery.schedules). The run's unique (dataset, window) is the fence; `last_due_at` and
    `last_window` advance in the same transaction that creates the run."""

    class Kind(models.TextChoices):
        DAILY = "daily"
        WEEKLY = "weekly"
        CRON = "cron"

    class CatchUp(models.TextChoices):
        LATEST = "latest"  # after a gap, only the newest missed window
        EACH = "each"  # each missed window, oldest first, at most catch_up_max

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="schedules")
    name = models.SlugField(max_length=100)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # daily/weekly: the local time; weekly: ISO weekday 1-7; cron: a 5-field expression.
    at_time = models.TimeField(null=True, blank=True)
    weekday = models.PositiveSmallIntegerField(null=True, blank=True)
    cron = models.CharField(max_length=200, blank=True)
    time_zone = models.CharField(max_length=64, default="UTC")  # IANA name
    window_format = models.CharField(max_length=64, default="%Y-%m-%d")
    # A file path, an http(s) URL (fetched through the guarded client) or "previous".
    manifest_source = models.TextField()
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    catch_up_max = models.PositiveSmallIntegerField(default=1)
    paused = models.BooleanField(default=False)
    # The last occurrence a run was made (or found) for; None: none yet, count from created_at.
    last_due_at = models.DateTimeField(null=True, blank=True)
    last_window = models.CharField(max_length=64, blank=True)
    last_run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True)
    # A failed manifest fetch: the error, and when to try again (backoff on `failures`).
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "name"], name="schedule_dataset_name_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name}/{self.name}"
