"""Exact-key search: a key pasted into a list's search box goes straight to its object.

Keys are long and exact, so a jump is a few unique-index probes whatever the run's size; text
that names no object falls through to the list's own search (dashboard.filtersets).
"""

from __future__ import annotations

import re

from django.urls import reverse

from recovery import keys
from recovery.models import Dataset, Observation, RemoteJob, Run, Task

HEX_KEY = re.compile(r"[0-9a-f]{64}")


def find_key(value: str, run: Run | None = None) -> str | None:
    """The page of the object an exact key names, or None.

    Every lookup is a unique-index probe: task_key, observation_key, (provider, provider_job_id);
    inside a run also a URL (its task keys, one per page type) and an entity key (its
    observation key).
    """
    value = value.strip()
    if HEX_KEY.fullmatch(value):
        task_id = Task.objects.filter(task_key=value).values_list("pk", flat=True).first()
        if task_id is None:
            task_id = (
                Observation.objects.filter(observation_key=value)
                .values_list("source_task_id", flat=True)
                .first()
            )
        if task_id is not None:
            return reverse("dashboard:task", args=[task_id])
    job = (
        RemoteJob.objects.filter(provider__in=dataset_providers(), provider_job_id=value)
        .values_list("pk", "state", "attempt__task_id")
        .first()
    )
    if job is not None:
        return reverse("dashboard:task", args=[job[2]])
    if run is None:
        return None
    dataset = run.dataset.name
    if "://" in value:
        try:
            canonical = keys.canonical_url(value)
        except ValueError:
            canonical = None
        if canonical:
            page_types = sorted((run.dataset.spec or {}).get("page_types", {}) or ["page"])
            candidates = [
                keys.task_key_from_canonical(dataset, canonical, run.window, p) for p in page_types
            ]
            task_ids = list(
                Task.objects.filter(task_key__in=candidates).values_list("pk", flat=True)[:2]
            )
            if len(task_ids) == 1:
                return reverse("dashboard:task", args=[task_ids[0]])
    observation = keys.observation_key(dataset, value, run.window)
    task_id = (
        Observation.objects.filter(observation_key=observation)
        .values_list("source_task_id", flat=True)
        .first()
    )
    if task_id is not None:
        return reverse("dashboard:task", args=[task_id])
    return None


def dataset_providers() -> list[str]:
    """The providers the datasets name: a remote job's provider is its dataset's.

    The few distinct values of the small dataset table let the (provider, provider_job_id)
    unique index serve a search by job id alone, once per provider.
    """
    return sorted(set(Dataset.objects.values_list("provider", flat=True)[:1000]))
