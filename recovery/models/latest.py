"""The current-state table: each entity's latest published observation, across windows.

Seed 002: "a current-state table may upsert by product ID, while a price-history table needs a
product ID plus collection date". Observation is the history (entity + window); this table is
the current state (dataset + entity), upserted by publication and kept by corrections
(recovery.delivery.latest).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from recovery.models.runs import Dataset, Run
from recovery.models.tasks import Observation


class LatestObservation(models.Model):
    """An entity's latest published observation: its window, its value, where it came from."""

    # Served by latest_dataset_entity_uniq (dataset first): no index of its own.
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="+", db_index=False)
    entity_key = models.CharField(max_length=500)
    window = models.CharField(max_length=64)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    # The row a correction of this value finds it by (recovery.delivery.corrections).
    observation = models.ForeignKey(Observation, on_delete=models.CASCADE, related_name="+")
    observation_key = models.CharField(max_length=64)
    partition = models.CharField(max_length=200, blank=True)
    payload = models.JSONField()
    payload_hash = models.CharField(max_length=64)
    source_task_key = models.CharField(max_length=64, blank=True)
    scraper_version = models.CharField(max_length=64, blank=True)
    version = models.PositiveIntegerField(default=1)
    # When the value was last written here: the publication that brought it, or a correction.
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # The upsert's conflict target, and the export's order (entity key within a dataset).
            models.UniqueConstraint(
                fields=["dataset", "entity_key"], name="latest_dataset_entity_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.entity_key}@{self.window}"
