"""Datasets and their runs: what is collected, each intended collection (dataset + window),
its rerun batches, and the per-partition and per-rule marks that decide its acceptance."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import models
from django.utils import timezone

from recovery.states.choices import RunState


class Dataset(models.Model):
    """What is collected: loaded from a spec file (see recovery.intake.specs)."""

    name = models.SlugField(max_length=100, unique=True)
    spec = models.JSONField()
    spec_sha256 = models.CharField(max_length=64)
    provider = models.CharField(max_length=32, default="direct")
    auto_accept = models.BooleanField(default=False)
    lease_seconds = models.PositiveIntegerField(null=True, blank=True)
    # The spec's lease_seconds = "auto": the lease is the one its recent attempts imply,
    # written to lease_auto_seconds by recovery.leases.sizing.refresh (None: too few yet, the
    # default holds). The claim reads COALESCE(lease_seconds, lease_auto_seconds, default).
    lease_auto = models.BooleanField(default=False, db_default=False)
    lease_auto_seconds = models.PositiveIntegerField(null=True, blank=True)
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
        indexes = [
            models.Index(fields=["dataset", "acceptance_state"], name="run_ds_state_idx"),
            # The runs list sorted by window or by creation (dashboard.lists.RUNS), id last for
            # the keyset cursor. (By dataset name it sorts one dataset's runs at a time: the
            # name is not a column here; RUNS says what that costs.)
            models.Index(fields=["window", "id"], name="run_window_idx"),
            models.Index(fields=["created_at", "id"], name="run_created_idx"),
        ]
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
    # "Re-extract from the archive" (recovery.archive): the batch's pages are read from the
    # page archive where a stored copy exists, fetched otherwise.
    from_archive = models.BooleanField(default=False, db_default=False)

    class Meta:
        verbose_name_plural = "recovery batches"

    def __str__(self) -> str:
        return f"batch {self.pk} of run {self.run_id}"


class RunPartition(models.Model):
    """A partition (e.g. one retailer) of a run: quarantine flag and triage marks."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="partitions")
    name = models.CharField(max_length=200)
    quarantined = models.BooleanField(default=False)
    quarantine_reason = models.TextField(blank=True)
    reviewed_by = models.CharField(max_length=150, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    # Early (provisional) quarantine while the run collects (quality.provisional): the sample
    # read so far in commit order, its invalid counts per partition rule, and the flag.
    sample_size = models.PositiveIntegerField(default=0)
    sample_invalid = models.JSONField(default=dict, blank=True)
    sample_last_id = models.BigIntegerField(default=0)
    provisional_reason = models.TextField(blank=True)
    provisional_at = models.DateTimeField(null=True, blank=True)
    # The partition's observations when an evaluation last decided its hold: their number and
    # a checksum of their updated_at (recovery.quality.validation). A partition whose rows changed
    # since is decided again even when the evaluation re-marks only repaired partitions.
    marked_rows = models.BigIntegerField(null=True, blank=True)
    marked_sum = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="runpartition_uniq")]


class ShiftSample(models.Model):
    """A `value_shift` rule's sample while its run collects (recovery.quality.provisional_shift):
    the field's numbers in commit order, the previous window's figures it is compared with,
    and the warning once raised."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="shift_samples")
    rule = models.CharField(max_length=100)
    values = models.JSONField(default=list, blank=True)
    last_id = models.BigIntegerField(default=0)  # the last observation read (the watermark)
    read = models.PositiveIntegerField(default=0)  # observations read, with or without a number
    previous = models.JSONField(null=True, blank=True)  # {"window", "run", "n", "median", ...}
    flagged_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "rule"], name="shiftsample_uniq")]


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

    @staticmethod
    def upsert(run: Run, results: Iterable[Any], evaluated_at: datetime) -> None:
        """Store each result (anything with rule, partition, passed, value, threshold and
        detail) as the latest of its rule and partition: one statement per 500 results."""
        ValidationResult.objects.bulk_create(
            [
                ValidationResult(
                    run=run,
                    rule=r.rule,
                    partition=r.partition,
                    passed=r.passed,
                    value=r.value,
                    threshold=r.threshold,
                    detail=r.detail,
                    evaluated_at=evaluated_at,
                )
                for r in results
            ],
            batch_size=500,
            update_conflicts=True,
            unique_fields=["run", "rule", "partition"],
            update_fields=["passed", "value", "threshold", "detail", "evaluated_at"],
        )
