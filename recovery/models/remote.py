"""Remote jobs of asynchronous providers: the job (recorded before the create call), its
result items, and the providers' notifications about it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from recovery.models.runs import Run
from recovery.models.tasks import Attempt, Observation, Task
from recovery.states.choices import HandoffState, RemoteJobState


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
        max_length=16, choices=HandoffState.choices, blank=True, default=""
    )
    # Seed 003's handoff, to the end: when the import accepted the provider's result, when the
    # destination accepted the handoff, when the consumer said it finished with it (its
    # acknowledgement, recovery.remote.handoff), and the last fresh link checked to work.
    result_accepted_at = models.DateTimeField(null=True, blank=True)
    handoff_delivered_at = models.DateTimeField(null=True, blank=True)
    consumer_finished_at = models.DateTimeField(null=True, blank=True)
    link_checked_at = models.DateTimeField(null=True, blank=True)
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

    def __str__(self) -> str:
        # The confirmation pages name their subject with it (it read "RemoteJob object (3)").
        return f"remote job #{self.pk} ({self.provider} {self.kind}, run #{self.run_id})"


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
