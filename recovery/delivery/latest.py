"""Each entity's latest published value, across windows: the current-state view (issue 28).

Data staff often want "the price of every product now", not one window's snapshot: a product
missing from the last window (its page failed, it was held with its partition) still has the
value of the window before. `recovery_latestobservation` keeps, per (dataset, entity key), the
latest published observation, with its window:

- `publish(run)` runs in the publish transaction (recovery.quality.acceptance.publish_run): one
  INSERT ... SELECT ... ON CONFLICT upserts the run's published rows (valid, outside held
  partitions: what its export carries, guarantee 6). An entity whose stored row is of a later
  window keeps it, so a backfilled older window published after a newer one changes nothing
  there. Windows are ordered as text (byte order, COLLATE "C" on PostgreSQL): name them so that
  they sort in time, as the schedules' `%Y-%m-%d` and `%G-W%V` do.
- `corrected(...)` runs in a correction's transaction (recovery.delivery.corrections.supersede):
  when the corrected observation is the one an entity's latest row holds, that row takes the
  new value and version.

Readers: `latest_rows(dataset)` (the rows, ordered by entity key: the API and exports) and
`stream_bytes(dataset, fmt)` (`manage.py export DATASET --latest --format csv|jsonl|parquet`).
The text formats are rendered here in Python on both databases, with exports' conventions:
formula cells neutralised in CSV, the payload as PostgreSQL renders jsonb in JSONL
(`exports.jsonb_text`), so SQLite and PostgreSQL give the same bytes. Parquet is a run
export's writer (recovery.delivery.parquet) with these columns, typed by the current spec.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from recovery.delivery import parquet
from recovery.delivery.export_rows import cell as _cell
from recovery.delivery.export_rows import cursor_scope as _cursor_scope
from recovery.delivery.exports import jsonb_text, neutralise
from recovery.models import Dataset, LatestObservation, Observation, Run

FORMATS = ("csv", "jsonl", "parquet")
TEXT_FORMATS = ("csv", "jsonl")
# The columns before the dataset's fields: an export's stored provenance (exports), same order.
COLUMNS = (
    "observation_key",
    "entity_key",
    "window",
    "partition",
    "source_task_key",
    "scraper_version",
    "version",
)
CHUNK_ROWS = 2000
FLUSH_BYTES = 64 * 1024


class LatestError(ValueError):
    """A latest export that cannot be made (unknown dataset, unknown format)."""


# --- writes -------------------------------------------------------------------------------


def _upsert_sql(vendor: str) -> str:
    # Byte order on PostgreSQL, whatever the database's collation ("2026-12" after "2026-11"
    # in every collation, but punctuation and case are not compared by bytes in all of them).
    collate = ' COLLATE "C"' if vendor == "postgresql" else ""
    return (
        'INSERT INTO recovery_latestobservation (dataset_id, entity_key, "window", run_id, '
        "observation_id, observation_key, partition, payload, payload_hash, source_task_key, "
        "scraper_version, version, updated_at) "
        'SELECT %s, o.entity_key, o."window", o.run_id, o.id, o.observation_key, o.partition, '
        "o.payload, o.payload_hash, COALESCE(o.source_task_key, "
        "(SELECT t.task_key FROM recovery_task t WHERE t.id = o.source_task_id)), "
        "o.scraper_version, o.version, %s "
        "FROM recovery_observation o WHERE o.run_id = %s AND o.validation_state = %s "
        "AND o.partition NOT IN (SELECT p.name FROM recovery_runpartition p "
        "WHERE p.run_id = %s AND p.quarantined = %s) "
        'ON CONFLICT (dataset_id, entity_key) DO UPDATE SET "window" = excluded."window", '
        "run_id = excluded.run_id, observation_id = excluded.observation_id, "
        "observation_key = excluded.observation_key, partition = excluded.partition, "
        "payload = excluded.payload, payload_hash = excluded.payload_hash, "
        "source_task_key = excluded.source_task_key, "
        "scraper_version = excluded.scraper_version, version = excluded.version, "
        "updated_at = excluded.updated_at "
        f'WHERE recovery_latestobservation."window"{collate} <= excluded."window"{collate}'
    )


def publish(run: Run) -> int:
    """Upsert the run's published rows as their entities' latest (inside the caller's publish
    transaction, so the table and the run's state commit together). Rows written."""
    with connection.cursor() as cursor:
        cursor.execute(
            _upsert_sql(connection.vendor),
            [
                run.dataset_id,
                timezone.now(),
                run.pk,
                Observation.Validation.VALID,
                run.pk,
                True,
            ],
        )
        return cursor.rowcount


def corrected(
    observation: Observation,
    payload: dict[str, Any],
    payload_hash: str,
    version: int,
    scraper_version: str | None = None,
) -> int:
    """A correction of `observation` (its new value and version) reaches the entity's latest
    row when that row holds this observation; a later window's value stays. Rows written."""
    fields: dict[str, Any] = {
        "payload": payload,
        "payload_hash": payload_hash,
        "version": version,
        "updated_at": timezone.now(),
    }
    if scraper_version is not None:
        fields["scraper_version"] = scraper_version
    return LatestObservation.objects.filter(
        dataset_id=observation.run.dataset_id,
        entity_key=observation.entity_key,
        observation_id=observation.pk,
    ).update(**fields)


# --- reads ---------------------------------------------------------------------------------


def find_dataset(name: str) -> Dataset:
    dataset = Dataset.objects.filter(name=name).first()
    if dataset is None:
        raise LatestError(f"dataset {name!r} does not exist")
    return dataset


def latest_rows(dataset: Dataset | str) -> QuerySet[LatestObservation]:
    """Each entity's latest published observation of the dataset (a name or a Dataset), in
    entity-key order (the unique index's order: keyset pagination on entity_key is a range)."""
    if isinstance(dataset, str):
        dataset = find_dataset(dataset)
    return LatestObservation.objects.filter(dataset=dataset).order_by("entity_key")


def row_object(row: LatestObservation) -> dict[str, Any]:
    """One latest row as the JSONL export's object: COLUMNS in order, then `payload`."""
    out: dict[str, Any] = {name: getattr(row, name) for name in COLUMNS}
    out["payload"] = row.payload
    return out


def fields(dataset: Dataset) -> list[str]:
    """Every field of the dataset's page types, sorted by name (as exports.columns)."""
    return sorted(
        {
            name
            for page_type in (dataset.spec or {}).get("page_types", {}).values()
            for name in page_type.get("fields", {})
        }
    )


def stream(dataset_name: str, fmt: str) -> Iterator[str]:
    """The latest rows as text chunks (csv, jsonl); bad input raises LatestError before any
    output."""
    if fmt not in TEXT_FORMATS:
        raise LatestError(f"format {fmt!r} is not one of {', '.join(TEXT_FORMATS)} (as text)")
    dataset = find_dataset(dataset_name)
    return _csv(dataset) if fmt == "csv" else _jsonl(dataset)


def stream_bytes(dataset_name: str, fmt: str) -> Iterator[bytes]:
    """The latest rows as byte chunks in any of FORMATS; bad input raises LatestError, and a
    Parquet decimal column too wide ExportError, before any output."""
    if fmt not in FORMATS:
        raise LatestError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt in TEXT_FORMATS:
        return (chunk.encode() for chunk in stream(dataset_name, fmt))
    return _parquet(find_dataset(dataset_name))


def _parquet(dataset: Dataset) -> Iterator[bytes]:
    """As a run's Parquet export (recovery.delivery.parquet), with the latest view's columns:
    COLUMNS, then the dataset's fields typed by its current spec."""
    types = parquet.declared_types(dataset.spec or {}, fields(dataset))
    facts = {
        "dataset": dataset.name,
        "view": "latest",
        "spec_sha256": dataset.spec_sha256,
        "fields": types,
    }
    file_schema = parquet.typed_schema(COLUMNS, types, latest_rows(dataset), facts)
    return parquet.written(file_schema, lambda: _rows(dataset), leading=len(COLUMNS), constants=[])


def _rows(dataset: Dataset):
    return (
        latest_rows(dataset)
        .annotate(payload_text=Cast("payload", TextField()))
        .values_list(*COLUMNS, "payload_text")
        .iterator(chunk_size=CHUNK_ROWS)
    )


def _csv(dataset: Dataset) -> Iterator[str]:
    names = fields(dataset)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow([neutralise(c) for c in (*COLUMNS, *names)])
    with _cursor_scope():
        for *provenance, payload_text in _rows(dataset):
            payload = json.loads(payload_text) if payload_text else {}
            if not isinstance(payload, dict):
                payload = {}
            cells = [_cell(v) for v in provenance] + [_cell(payload.get(f)) for f in names]
            writer.writerow([neutralise(c) for c in cells])
            if buffer.tell() >= FLUSH_BYTES:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
    yield buffer.getvalue()


def _jsonl(dataset: Dataset) -> Iterator[str]:
    parts: list[str] = []
    size = 0
    with _cursor_scope():
        for *provenance, payload_text in _rows(dataset):
            payload = (
                jsonb_text(json.loads(payload_text, parse_float=Decimal))
                if payload_text
                else "null"
            )
            head = json.dumps(dict(zip(COLUMNS, provenance, strict=True)), ensure_ascii=False)
            line = head[:-1] + ', "payload": ' + payload + "}\n"
            parts.append(line)
            size += len(line)
            if size >= FLUSH_BYTES:
                yield "".join(parts)
                parts, size = [], 0
    yield "".join(parts)
