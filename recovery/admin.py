"""Django admin for the raw records: read-only for everyone but superusers.

Staff users see what their view permissions allow; only a superuser can add, change or delete,
because records change through the engine's guarded moves (recovery.states), never by hand.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Exists, OuterRef

from recovery import models
from recovery.states import row_states


class RawRecordAdmin(admin.ModelAdmin):
    list_per_page = 50
    show_full_result_count = False  # no COUNT(*) over a million rows per page view

    def has_add_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_change_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser


@admin.register(models.Dataset)
class DatasetAdmin(RawRecordAdmin):
    list_display = ("name", "provider", "auto_accept", "max_attempts", "updated_at")
    search_fields = ("name",)


@admin.register(models.Run)
class RunAdmin(RawRecordAdmin):
    list_display = ("id", "dataset", "window", "acceptance_state", "task_total", "created_at")
    list_filter = ("acceptance_state",)
    list_select_related = ("dataset",)
    search_fields = ("window", "dataset__name")


@admin.register(models.Task)
class TaskAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "state", "partition", "page_type", "last_error_class")
    list_filter = ("state", "page_type")
    raw_id_fields = ("run", "parent", "recovery_batch")
    search_fields = ("=task_key",)


@admin.register(models.Attempt)
class AttemptAdmin(RawRecordAdmin):
    list_display = (
        "id",
        "task_id",
        "outcome",
        "error_class",
        "http_status",
        "worker",
        "started_at",
    )
    list_filter = ("outcome",)
    raw_id_fields = ("task", "run", "recovery_batch", "replaces")


class VerdictFilter(admin.ChoicesFieldListFilter):
    """The stored verdict, named as such: a held row keeps its verdict (quality.row_states)."""

    def __init__(self, field, request, params, model, model_admin, field_path):
        super().__init__(field, request, params, model, model_admin, field_path)
        self.title = "verdict"


@admin.register(models.Observation)
class ObservationAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "partition", "state", "verdict", "version", "observed_at")
    list_filter = (("validation_state", VerdictFilter),)
    raw_id_fields = ("run", "source_task", "source_attempt")
    search_fields = ("=observation_key",)

    def get_queryset(self, request):
        # Held is the partition's quarantine, not a stored value: one EXISTS per listed row
        # on runpartition_uniq (run, name).
        quarantined = models.RunPartition.objects.filter(
            run_id=OuterRef("run_id"), name=OuterRef("partition"), quarantined=True
        )
        return super().get_queryset(request).annotate(in_held_partition=Exists(quarantined))

    @admin.display(description="state")
    def state(self, obj: models.Observation) -> str:
        """As the product shows it: held in a quarantined partition, else the verdict."""
        return row_states.HELD if obj.in_held_partition else obj.validation_state

    @admin.display(description="verdict", ordering="validation_state")
    def verdict(self, obj: models.Observation) -> str:
        return obj.validation_state


@admin.register(models.ObservationVersion)
class ObservationVersionAdmin(RawRecordAdmin):
    list_display = ("id", "observation_id", "version", "superseded_at")
    raw_id_fields = ("observation", "source_attempt")


@admin.register(models.RecoveryBatch)
class RecoveryBatchAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "state", "task_count", "created_by", "created_at")
    raw_id_fields = ("run",)


@admin.register(models.OutboxEvent)
class OutboxEventAdmin(RawRecordAdmin):
    list_display = ("id", "event_type", "state", "attempts", "next_attempt_at", "delivered_at")
    list_filter = ("state", "event_type")
    raw_id_fields = ("run",)


@admin.register(models.RemoteJob)
class RemoteJobAdmin(RawRecordAdmin):
    list_display = ("id", "provider", "kind", "provider_job_id", "state", "credits_used")
    list_filter = ("state", "provider")
    raw_id_fields = ("attempt", "run", "replaces")


@admin.register(models.RemoteJobItem)
class RemoteJobItemAdmin(RawRecordAdmin):
    list_display = ("id", "job_id", "item_index", "status")
    raw_id_fields = ("job", "task", "observation", "retried_in")


@admin.register(models.WebhookReceipt)
class WebhookReceiptAdmin(RawRecordAdmin):
    list_display = ("id", "provider", "provider_job_id", "status", "received_at")
    raw_id_fields = ("job",)


@admin.register(models.Incident)
class IncidentAdmin(RawRecordAdmin):
    list_display = ("id", "occurred_at", "provider", "source", "http_status", "outcome")
    list_filter = ("provider", "source")
    raw_id_fields = ("run", "remote_job", "attempt", "task")


@admin.register(models.RunPartition)
class RunPartitionAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "name", "quarantined", "reviewed_by")
    list_filter = ("quarantined",)
    raw_id_fields = ("run",)


@admin.register(models.ShiftSample)
class ShiftSampleAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "rule", "read", "flagged_at")
    raw_id_fields = ("run",)


@admin.register(models.ValidationResult)
class ValidationResultAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "rule", "partition", "passed", "value", "threshold")
    list_filter = ("passed",)
    raw_id_fields = ("run",)


@admin.register(models.TaskCountDelta)
class TaskCountDeltaAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "partition", "state", "delta")
    raw_id_fields = ("run",)


@admin.register(models.WorkerHeartbeat)
class WorkerHeartbeatAdmin(RawRecordAdmin):
    list_display = ("worker", "hostname", "pid", "last_seen", "claimed", "committed")


@admin.register(models.TriageNote)
class TriageNoteAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "partition", "task_id", "author", "created_at")
    raw_id_fields = ("run", "task")


@admin.register(models.AuditEntry)
class AuditEntryAdmin(RawRecordAdmin):
    list_display = ("at", "actor", "action", "object_type", "object_id")
    list_filter = ("action",)
    search_fields = ("actor", "object_id")


@admin.register(models.Schedule)
class ScheduleAdmin(RawRecordAdmin):
    list_display = ("id", "dataset", "name", "kind", "paused", "last_window", "retry_at")
    list_filter = ("kind", "paused")
    raw_id_fields = ("dataset", "last_run")


@admin.register(models.LatestObservation)
class LatestObservationAdmin(RawRecordAdmin):
    list_display = ("id", "dataset_id", "entity_key", "window", "run_id", "observation_key")
    raw_id_fields = ("dataset", "run", "observation")


@admin.register(models.HostSlot)
class HostSlotAdmin(RawRecordAdmin):
    list_display = ("host", "next_free", "last_start", "last_granted")


@admin.register(models.HostSeat)
class HostSeatAdmin(RawRecordAdmin):
    list_display = ("host", "seat", "holder", "held_until")


@admin.register(models.RobotsState)
class RobotsStateAdmin(RawRecordAdmin):
    list_display = ("id", "run_id")
    raw_id_fields = ("run",)


@admin.register(models.ListingTotal)
class ListingTotalAdmin(RawRecordAdmin):
    list_display = ("id", "run_id", "page_type", "stated", "found", "checked_at")
    raw_id_fields = ("run",)
