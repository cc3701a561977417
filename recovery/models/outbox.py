"""The outbox: publication and delivery events, written with the change they announce."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from recovery.models.runs import Run
from recovery.states.choices import DeliveryState


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
