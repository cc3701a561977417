"""Streamed exports of accepted observations (CSV, JSONL or Parquet), in constant memory.

Only valid observations of accepted or published runs are exported: a candidate, rejected or
collecting run is refused, and held (quarantined partition) or invalid observations are never
included (guarantee 6). Rows are read in observation-id order and yielded in chunks of about
64 KB: on PostgreSQL the database renders them (`_pg_blocks`: CSV through COPY (SELECT ...)
TO STDOUT, JSONL through COPY in binary format, both inside a transaction so nothing is materialised
first, read as bytes and passed on as bytes by `stream_bytes`); on SQLite they come from
`QuerySet.iterator` and Python renders them (`_csv`, `_jsonl`).

Provenance: the observation's keys, window, partition, source task, scraper version and
version, then the run's partial-result marks (`stopped_reason`, `coverage_note`: the same on
every row, empty when the run is complete; recovery/delivery/partial.py).

CSV: provenance columns, then the dataset's fields in a stable order (sorted by name: the spec
is stored as jsonb, which does not keep key order); every cell is quoted. A cell that a
spreadsheet would run as a formula (starting with =, +, -, @, tab or CR) gets a leading
apostrophe. Lines end with LF. Both paths give the same bytes (tests/db/test_exports.py).
JSONL: one object per line, the provenance keys in PROVENANCE order and then the payload,
with json.dumps's separators; the payload is rendered as PostgreSQL renders jsonb (keys by
length then bytes, numbers positional: `jsonb_text`), so SQLite and PostgreSQL give the same
bytes (tests/db/test_exports.py compares both with one expected text).
Parquet: typed columns from the spec's field types, written in row groups as the rows stream
(recovery/delivery/parquet.py); binary, so only `stream_bytes` makes it.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from django.db import connection, transaction

from recovery import audit
from recovery.delivery import parquet, partial
from recovery.delivery.export_rows import (
    PARTIAL_PROVENANCE,
    PROVENANCE,
    STORED_PROVENANCE,
    TASK_KEY,
    ExportError,
    columns,
    rows_queryset,
)
from recovery.delivery.export_rows import cell as _cell
from recovery.delivery.export_rows import cursor_scope as _cursor_scope
from recovery.delivery.export_rows import rows as _rows
from recovery.models import Observation, Run
from recovery.states.run import AVAILABLE

TEXT_FORMATS = ("csv", "jsonl")
FORMATS = (*TEXT_FORMATS, "parquet")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
FLUSH_BYTES = 64 * 1024


def neutralise(cell: str) -> str:
    """Spreadsheet-formula neutralisation (OWASP CSV injection): prefix an apostrophe."""
    return "'" + cell if cell.startswith(FORMULA_PREFIXES) else cell


def current_run(dataset_name: str) -> Run | None:
    """The dataset's current run: the newest accepted or published one. A run in progress or
    rejected never replaces it (guarantee 9)."""
    return (
        Run.objects.filter(dataset__name=dataset_name, acceptance_state__in=AVAILABLE)
        .select_related("dataset")
        .order_by("-created_at", "-pk")
        .first()
    )


def exportable(run_id: int) -> Run:
    run = Run.objects.select_related("dataset").filter(pk=run_id).first()
    if run is None:
        raise ExportError(f"run {run_id} does not exist")
    if run.acceptance_state not in AVAILABLE:
        raise ExportError(
            f"run {run_id} is {run.acceptance_state}; only accepted or published runs export"
        )
    return run


def filename(run: Run, fmt: str) -> str:
    safe_window = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in run.window)
    return f"{run.dataset.name}-{safe_window}-run{run.pk}.{fmt}"


def _checked(run_id: int, fmt: str) -> Run:
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    return exportable(run_id)


def stream(run_id: int, fmt: str) -> Iterator[str]:
    """The export of a run as text chunks (CSV, JSONL). Bad input raises ExportError before
    any output."""
    run = _checked(run_id, fmt)
    if fmt not in TEXT_FORMATS:
        raise ExportError(f"format {fmt!r} is binary: it is written as bytes, not text")
    if connection.vendor == "postgresql":
        return _pg_lines(run, fmt)
    return _csv(run) if fmt == "csv" else _jsonl(run)


def stream_bytes(run_id: int, fmt: str) -> Iterator[bytes]:
    """The same export as UTF-8 byte chunks, for a binary output (the command's standard
    output or file): on PostgreSQL COPY's bytes go straight through, never decoded and encoded
    again. Bad input raises ExportError before any output."""
    run = _checked(run_id, fmt)
    if fmt == "parquet":
        return parquet.stream(run)
    if connection.vendor == "postgresql":
        return _pg_blocks(run, fmt)
    return (chunk.encode() for chunk in (_csv(run) if fmt == "csv" else _jsonl(run)))


def download(run_id: int, fmt: str, actor: str) -> Iterator[str] | Iterator[bytes]:
    """A person's download of an export: the stream (text for CSV and JSONL, bytes for
    Parquet), with an audit entry saying who took which run's data (exports leave the system,
    so the log records each one)."""
    chunks = stream(run_id, fmt) if fmt in TEXT_FORMATS else stream_bytes(run_id, fmt)
    audit.record(actor, "export_download", Run.objects.get(pk=run_id), "", format=fmt)
    return chunks


# On PostgreSQL the database renders the output and Python passes bytes through: per-row
# Python work (csv.writer, JSON parsing per cell, one str per row from a cursor, decoding and
# re-encoding) was most of the export time. CSV is COPY (SELECT ...) TO STDOUT, JSONL one line
# per row through COPY in binary format, both read as bytes and handed on in chunks
# (`stream_bytes`: the command writes them to a binary output as they come). Both walk the
# observations in id order from an index, so rows stream from the first block and nothing is
# sorted or hashed up front.
_PROVENANCE_SQL = (
    "o.observation_key",
    "o.entity_key",
    'o."window"',
    "o.partition",
    # The copy on the row; the task's own key only where none is stored (NULL: rows written
    # before the copy existed). COALESCE evaluates the subquery only then.
    "COALESCE(o.source_task_key, "
    "(SELECT t.task_key FROM recovery_task t WHERE t.id = o.source_task_id))",
    "o.scraper_version",
    "o.version",
)
# Provenance cells that cannot start with a formula character (hex keys, a number).
_NEVER_FORMULA = frozenset({"observation_key", "source_task_key", "version"})
# One integer test of the first character (ascii() is its code point, 0 for ''), cheaper per
# cell than comparing left(cell, 1) with six strings. The codes are FORMULA_PREFIXES'.
_FORMULA_CODES = ", ".join(str(ord(prefix)) for prefix in FORMULA_PREFIXES)
_SQL_NEUTRALISE = "CASE WHEN ascii({0}) IN (CODES) THEN '''' || {0} ELSE {0} END".replace(
    "CODES", _FORMULA_CODES
)
# row_states.exportable spelled for COPY (valid and not held): keep the two the same rows.
_SQL_WHERE = (
    "WHERE o.run_id = %s AND o.validation_state = %s AND o.partition NOT IN "
    "(SELECT p.name FROM recovery_runpartition p WHERE p.run_id = %s AND p.quarantined) "
    "ORDER BY o.id"
)


def _pg_query(run: Run, fmt: str) -> tuple[str, list]:
    fields = columns(run)[len(PROVENANCE) :]
    marks = partial.marks(run)
    params: list = []
    if fmt == "csv":
        # The provenance columns are NOT NULL, so no coalesce; a payload field that is missing
        # or JSON null (->> gives NULL) must print as a quoted "" like the Python path.
        cells = [
            expr if name in _NEVER_FORMULA else _SQL_NEUTRALISE.format(expr)
            for name, expr in zip(STORED_PROVENANCE, _PROVENANCE_SQL, strict=True)
        ]
        # The run's marks are constants: neutralised here, bound as text (COPY's parameters
        # are merged client-side, and an untyped literal would be `unknown`).
        cells.extend("%s::text" for _ in PARTIAL_PROVENANCE)
        params.extend(neutralise(value) for value in (marks.stopped_reason, marks.coverage_note))
        fetched = []
        for i, name in enumerate(fields):
            fetched.append(f"coalesce(o.payload ->> %s, '') AS f{i}")
            params.append(name)
            cells.append(_SQL_NEUTRALISE.format(f"c.f{i}"))
        # Each payload field is read once per row in a lateral subquery (OFFSET 0 keeps it from
        # being flattened, which would evaluate ->> once per reference in the CASE).
        lateral = f"CROSS JOIN LATERAL (SELECT {', '.join(fetched)} OFFSET 0) c " if fields else ""
        sql = (
            f"COPY (SELECT {', '.join(cells)} FROM recovery_observation o {lateral}"
            f"{_SQL_WHERE}) TO STDOUT (FORMAT csv, FORCE_QUOTE *)"
        )
    else:
        # Spelled out rather than json_build_object, whose text form is `"key" : value`:
        # the line must be byte for byte what `_jsonl` writes (json.dumps's separators, these
        # keys in this order, the payload as jsonb renders it). A chain of || measured a little
        # cheaper than one concat() (4.0 against 4.3 s of backend CPU at 1,000,000 rows).
        values = [f"coalesce(to_json({expr})::text, 'null')" for expr in _PROVENANCE_SQL]
        values[-1] = "o.version::text"
        values.extend("to_json(%s::text)::text" for _ in PARTIAL_PROVENANCE)
        params.extend((marks.stopped_reason, marks.coverage_note))
        pieces = [
            f"'{', ' if i else '{'}\"{name}\": ' || {value}"
            for i, (name, value) in enumerate(zip(PROVENANCE, values, strict=True))
        ]
        line = " || ".join(
            [*pieces, "', \"payload\": ' || coalesce(o.payload::text, 'null') || '}'"]
        )
        # Through COPY as well, so the database streams while this process writes (a named
        # cursor's fetches leave one side idle while the other works), in binary format: each
        # line's bytes as they are (COPY's CSV and text formats scan every byte again, and text
        # would escape the JSON's backslashes).
        sql = (
            f"COPY (SELECT {line} FROM recovery_observation o {_SQL_WHERE}) TO STDOUT "
            "(FORMAT binary)"
        )
    return sql, [*params, run.pk, Observation.Validation.VALID, run.pk]


def _header(run: Run) -> str:
    header = io.StringIO()
    csv.writer(header, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow(
        [neutralise(c) for c in columns(run)]
    )
    return header.getvalue()


def _pg_blocks(run: Run, fmt: str) -> Iterator[bytes]:
    """The export as UTF-8 bytes, in chunks of at least FLUSH_BYTES, but the last."""
    sql, params = _pg_query(run, fmt)
    with transaction.atomic():
        connection.ensure_connection()
        buffer = bytearray(_header(run).encode() if fmt == "csv" else b"")
        with connection.connection.cursor() as cursor, cursor.copy(sql, params) as copy:
            if fmt == "csv":
                pieces = iter(copy)  # libpq hands a COPY over one row per block
            else:
                from psycopg.types.string import ByteaBinaryLoader  # PostgreSQL only

                # Each line loaded as its raw UTF-8 bytes (no str per row).
                cursor.adapters.register_loader("text", ByteaBinaryLoader)
                copy.set_types(["text"])
                pieces = (line + b"\n" for (line,) in copy.rows())
            # Gathered into chunks.
            for piece in pieces:
                buffer += piece
                if len(buffer) >= FLUSH_BYTES:
                    yield bytes(buffer)
                    buffer.clear()
        yield bytes(buffer)


def _pg_lines(run: Run, fmt: str) -> Iterator[str]:
    # A chunk may end inside a UTF-8 character: decode incrementally.
    decoder = codecs.getincrementaldecoder("utf-8")()
    for chunk in _pg_blocks(run, fmt):
        yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


def _csv(run: Run) -> Iterator[str]:
    header = columns(run)
    fields = header[len(PROVENANCE) :]
    marks = partial.marks(run)
    run_cells = [marks.stopped_reason, marks.coverage_note]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    buffer.write(_header(run))
    loads = json.loads
    with _cursor_scope():
        rows = _rows(run)
        for *prov, payload_text in rows:
            payload = loads(payload_text) if payload_text else {}
            if not isinstance(payload, dict):
                payload = {}
            cells = [_cell(v) for v in prov]
            cells.extend(run_cells)
            cells.extend(_cell(payload.get(f)) for f in fields)
            writer.writerow([neutralise(c) for c in cells])
            if buffer.tell() >= FLUSH_BYTES:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
    yield buffer.getvalue()


def jsonb_text(value: Any) -> str:
    """JSON text exactly as PostgreSQL renders a jsonb value, so both databases export the
    same bytes: object keys ordered by UTF-8 length, then bytes; `, ` and `: ` separators;
    numbers as PostgreSQL's numeric prints them (positional, scale kept: 1.50, 0.0000001),
    which is why callers parse floats as Decimal."""
    if isinstance(value, dict):
        keys = sorted(value, key=_jsonb_key_order)
        return "{" + ", ".join(f"{_string(k)}: {jsonb_text(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, Decimal):
        if value.is_zero() and value.is_signed():
            value = value.copy_abs()  # numeric has no negative zero
        return format(value, "f")
    return str(value)  # int


def _jsonb_key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return len(raw), raw


# json's own C string encoder for ensure_ascii=False: it escapes exactly what PostgreSQL's
# escape_json does (quote, backslash, C0 controls), at a fraction of json.dumps's cost.
_string = json.encoder.encode_basestring


def _jsonl(run: Run) -> Iterator[str]:
    dumps = json.dumps
    loads = json.loads
    marks = partial.marks(run)
    parts: list[str] = []
    size = 0
    with _cursor_scope():
        rows = _rows(run)
        for key, entity, window, partition, task_key, version_s, version, payload_text in rows:
            # The payload is re-rendered the way jsonb prints it: SQLite stores the text
            # in insertion order, PostgreSQL in its own (see jsonb_text).
            payload = (
                jsonb_text(loads(payload_text, parse_float=Decimal)) if payload_text else "null"
            )
            line = (
                dumps(
                    {
                        "observation_key": key,
                        "entity_key": entity,
                        "window": window,
                        "partition": partition,
                        "source_task_key": task_key,
                        "scraper_version": version_s,
                        "version": version,
                        "stopped_reason": marks.stopped_reason,
                        "coverage_note": marks.coverage_note,
                    },
                    ensure_ascii=False,
                )[:-1]
                + ', "payload": '
                + payload
                + "}\n"
            )
            parts.append(line)
            size += len(line)
            if size >= FLUSH_BYTES:
                yield "".join(parts)
                parts, size = [], 0
    yield "".join(parts)


def row_objects(
    run: Run, *, after: int = 0, limit: int | None = None, keys: list[str] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """Exported rows as JSONL's objects (provenance keys in PROVENANCE order, then the payload),
    each with its observation id, in id order: after the id `after`, at most `limit`, or only
    the observation keys `keys`. The API's row pages and change feed; valid, unheld rows only."""
    marks = partial.marks(run)
    provenance = [
        "task_key_or_lookup" if name == "source_task_key" else name for name in STORED_PROVENANCE
    ]
    rows = rows_queryset(run).filter(pk__gt=after).annotate(task_key_or_lookup=TASK_KEY)
    if keys is not None:
        rows = rows.filter(observation_key__in=keys)
    values = rows.values_list("pk", *provenance, "payload")
    picked = values if limit is None else values[:limit]
    out = []
    for pk, *prov, payload in picked:
        row = dict(zip(STORED_PROVENANCE, prov, strict=True))
        row.update(marks.as_dict())
        row["payload"] = payload
        out.append((pk, row))
    return out
