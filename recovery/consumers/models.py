"""Personal API tokens and the numbered change feed (see the package docstring)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from recovery.models import Dataset, OutboxEvent, Run


class ApiToken(models.Model):
    """A personal token for the pull API. Only its SHA-256 is stored (guarantee 11): the token
    itself is shown once, when it is made. `prefix` is its visible start, which names it in
    lists and the audit log and can never be used alone."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    token_sha256 = models.CharField(max_length=64, unique=True)
    # The datasets it may read; `all_datasets` instead of an empty set, so that an empty scope
    # can never silently mean "everything".
    all_datasets = models.BooleanField(default=False)
    datasets = models.ManyToManyField(Dataset, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.CharField(max_length=150)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)

    class Meta:
        permissions = [("manage_api_tokens", "Create and revoke API tokens for other users")]
        indexes = [models.Index(fields=["user", "created_at"], name="apitoken_user_idx")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class FeedEntry(models.Model):
    """An outbox event (accepted, published, correction) given its place in the change feed.

    `seq` is assigned after the event's transaction committed, by one sequencer at a time
    (feed.sequence), so the feed's order is the order in which events became visible: a
    consumer that has read up to `seq` N never later meets an event numbered below N (an id or
    timestamp taken inside the writing transaction could commit after a higher one)."""

    seq = models.BigIntegerField(unique=True)
    event = models.OneToOneField(OutboxEvent, on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=32)
    # The event's created_at: the sequencer looks for new events from the newest it numbered
    # (less a margin), through outbox_created_idx.
    event_created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "feed entries"
        indexes = [
            # A dataset's changes since a version, and its current version (max seq).
            models.Index(fields=["dataset", "seq"], name="feed_dataset_seq_idx"),
            models.Index(fields=["event_created_at"], name="feed_event_created_idx"),
        ]
