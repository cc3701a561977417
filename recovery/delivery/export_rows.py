"""The rows an export reads, shared by every format (recovery/delivery/exports.py writes CSV and
JSONL, recovery/delivery/parquet.py writes Parquet): the provenance columns, the exported
observations (valid, outside any quarantined partition: guarantee 6) and their Python-path
reading. Apart from exports.py so that parquet.py reads them without importing the module that
hands it its format.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any

from django.db import connection, transaction
from django.db.models import OuterRef, Subquery, TextField
from django.db.models.functions import Cast, Coalesce

from recovery.models import Run, Task
from recovery.states import row_states

CHUNK_ROWS = 2000
# The row's own provenance, stored on the observation ...
STORED_PROVENANCE = (
    "observation_key",
    "entity_key",
    "window",
    "partition",
    "source_task_key",
    "scraper_version",
    "version",
)
# ... then the run's partial-result marks, the same on every row (partial.Marks).
PARTIAL_PROVENANCE = ("stopped_reason", "coverage_note")
PROVENANCE = (*STORED_PROVENANCE, *PARTIAL_PROVENANCE)


class ExportError(ValueError):
    """An export that cannot be made (unknown run, run not accepted, unknown format)."""


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value)


def columns(run: Run) -> list[str]:
    """Provenance columns, then every field of the dataset's page types, sorted by name."""
    fields = {
        name
        for page_type in (run.dataset.spec or {}).get("page_types", {}).values()
        for name in page_type.get("fields", {})
    }
    return [*PROVENANCE, *sorted(fields)]


def rows_queryset(run: Run):
    """The exported observations: valid, and outside any quarantined partition."""
    return row_states.exportable_by_id(run.pk)


def cursor_scope():
    # PostgreSQL: inside a transaction the named cursor streams straight from the scan.
    # SQLite: no transaction (ours are BEGIN IMMEDIATE, which would block every writer).
    return transaction.atomic() if connection.vendor == "postgresql" else nullcontext()


# The stored copy of the task key, or the task's own where none is stored (as _PROVENANCE_SQL).
TASK_KEY = Coalesce(
    "source_task_key",
    Subquery(Task.objects.filter(pk=OuterRef("source_task_id")).values("task_key")[:1]),
)


def rows(run: Run):
    """The Python paths' rows: the PROVENANCE values in that order, then the payload as JSON
    text (what _PROVENANCE_SQL reads on PostgreSQL). Read inside `cursor_scope()`."""
    provenance = [
        "task_key_or_lookup" if name == "source_task_key" else name for name in STORED_PROVENANCE
    ]
    return (
        rows_queryset(run)
        .annotate(task_key_or_lookup=TASK_KEY, payload_text=Cast("payload", TextField()))
        .values_list(*provenance, "payload_text")
        .iterator(chunk_size=CHUNK_ROWS)
    )
