"""What operators and processes keep beside the collection: worker heartbeats, triage notes,
the audit log and the schedules that make runs."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from recovery.models.runs import Dataset, Run
from recovery.models.tasks import Task
from recovery.states.choices import WorkerKind


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
    (recovery.intake.schedule_runs). The run's unique (dataset, window) is the fence;
    `last_due_at` and `last_window` advance in the same transaction that creates the run."""

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
    # The last pause: windows due after paused_at (and, once resumed, up to resumed_at) are
    # skipped, never made (recovery.intake.recurrence.paused_over).
    paused_at = models.DateTimeField(null=True, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)
    # The schedule's place: due instants up to it are dealt with (the last one whose run was
    # made or found, or the resume that ended a pause); None: none yet, count from created_at.
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
        indexes = [
            # The Schedules list (dashboard.lists.SCHEDULES) sorted by schedule name, and its
            # search by the beginning of one (a range here). Its default order, by dataset name
            # then schedule name, walks the dataset name index and each dataset's schedules
            # (PostgreSQL: an incremental sort of one dataset's schedules at a time).
            models.Index(fields=["name", "id"], name="schedule_name_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name}/{self.name}"
