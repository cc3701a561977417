"""The datasets pages' reads: each dataset's runs, its current accepted run, its spec history.

Everything is bounded: a page of datasets (the list's pager), the newest runs of one dataset
through run_dataset_window_uniq's leading column, and its audit entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from recovery.delivery import exports
from recovery.leases import sizing
from recovery.models import AuditEntry, Dataset, Run

RUNS_SHOWN = 50
HISTORY_SHOWN = 50


@dataclass(slots=True)
class Summary:
    dataset: Dataset
    current: Run | None  # the newest accepted or published run (exports.current_run)
    latest: Run | None


@dataclass(slots=True)
class Version:
    entry: AuditEntry
    sha256: str
    previous: str
    spec_json: str  # "" for entries written before specs were kept in the audit log


def summaries(datasets: list[Dataset]) -> list[Summary]:
    latest = {}
    for ds in datasets:
        latest[ds.pk] = Run.objects.filter(dataset=ds).order_by("-pk").first()
    return [Summary(ds, exports.current_run(ds.name), latest[ds.pk]) for ds in datasets]


def runs(dataset: Dataset) -> list[Run]:
    return list(Run.objects.filter(dataset=dataset).order_by("-pk")[:RUNS_SHOWN])


def history(dataset: Dataset) -> list[Version]:
    entries = AuditEntry.objects.filter(object_type="dataset", object_id=str(dataset.pk))
    out = []
    for entry in entries.order_by("-at", "-pk")[:HISTORY_SHOWN]:
        detail: dict[str, Any] = entry.detail or {}
        spec = detail.get("spec")
        out.append(
            Version(
                entry=entry,
                sha256=str(detail.get("spec_sha256", "")),
                previous=str(detail.get("previous_sha256", "")),
                spec_json=json.dumps(spec, indent=2, sort_keys=True) if spec else "",
            )
        )
    return out


def spec_json(dataset: Dataset) -> str:
    return json.dumps(dataset.spec, indent=2, sort_keys=True)


def task_times(dataset: Dataset) -> sizing.LeaseReport:
    """Its task durations and the lease they imply (bounded: recovery.leases.sizing)."""
    return sizing.report(dataset, settings.SALVAGE_LEASE_SECONDS)
