"""Parquet export of a run's accepted observations: typed columns, row groups, stable bytes.

Columns: the CSV's provenance columns (export_rows.PROVENANCE: strings, `version` an int64), then
the dataset's fields sorted by name, each typed by its spec `type`:

| spec type   | Parquet (Arrow) type   | value in the payload                               |
|-------------|------------------------|----------------------------------------------------|
| `text`      | string                 | as its CSV cell, without the formula apostrophe    |
| `int`       | int64                  | a JSON integer, or a text of digits                |
| `decimal`   | decimal128(38, s)      | a decimal text ("12.50") or a JSON number          |
| `bool`      | bool                   | JSON true/false, or the text "true"/"false"        |
| `timestamp` | timestamp[us, tz=UTC]  | an ISO 8601 text; one without an offset is UTC     |

A missing or JSON-null value is null. A field declared with two different types by two page
types is a string column. The decimal scale `s` is the largest number of digits after the
point among the run's values of that field (one SQL aggregate before the first row), so
"12.5" and "12.50" both fit and nothing is rounded; a value that does not convert to its
column's type stops the export with ExportError naming the field, the observation and the
value (an export never silently drops or alters a value).

Formula neutralisation is a CSV defence for spreadsheets; Parquet carries values as they are.

Streaming, memory flat: rows are read through exports' server-side cursor (PostgreSQL) or
`QuerySet.iterator` (SQLite) and written ROW_GROUP_ROWS at a time; after each row group the
file's bytes so far are yielded, so at most one row group's values are held.

Byte-stable: the same rows give the same bytes. Nothing in the file depends on the time or
chance: the writer's own metadata is its version (`created_by`, pinned with pyarrow), the
schema, and `salvage` key-value metadata made only of the run's facts (dataset, run, window,
versions, field types, partial-result marks), written with sorted keys.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Iterator
from decimal import Context, Decimal, Inexact, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.db.models import Case, IntegerField, Max, QuerySet, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Length, StrIndex
from django.db.models.lookups import GreaterThan

from recovery.delivery import export_rows, partial
from recovery.models import Run

ROW_GROUP_ROWS = 50_000
COMPRESSION = "zstd"
DECIMAL_PRECISION = 38  # the widest decimal128; the scale is the run's own
CONTENT_TYPE = "application/vnd.apache.parquet"

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "text": pa.string(),
    "int": pa.int64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_DIGITS = re.compile(r"[+-]?[0-9]+")


def field_types(run: Run) -> dict[str, str]:
    """{field: spec type} for the export's fields (export_rows.columns), `text` where page types
    disagree."""
    names = export_rows.columns(run)[len(export_rows.PROVENANCE) :]
    return declared_types(run.dataset.spec or {}, names)


def declared_types(spec: dict[str, Any], names: list[str]) -> dict[str, str]:
    """{field: spec type} for `names` as the spec declares them, `text` where page types
    disagree."""
    declared: dict[str, set[str]] = {}
    for page_type in spec.get("page_types", {}).values():
        for name, field in page_type.get("fields", {}).items():
            declared.setdefault(name, set()).add(field.get("type", "text"))
    return {
        name: next(iter(declared[name])) if len(declared.get(name, ())) == 1 else "text"
        for name in names
    }


def decimal_scales(rows: QuerySet[Any], names: list[str]) -> dict[str, int]:
    """The largest number of digits after the decimal point of each field among `rows` (a
    queryset of rows with a JSON `payload`): one aggregate, on either database."""
    if not names:
        return {}
    aggregates = {}
    for i, name in enumerate(names):
        text = KeyTextTransform(name, "payload")
        dot = StrIndex(text, Value("."))
        aggregates[f"s{i}"] = Max(
            Case(
                When(GreaterThan(dot, 0), then=Length(text) - dot),
                default=Value(0),
                output_field=IntegerField(),
            )
        )
    found = rows.order_by().aggregate(**aggregates)
    return {name: int(found[f"s{i}"] or 0) for i, name in enumerate(names)}


def schema(run: Run) -> pa.Schema:
    types = field_types(run)
    marks = partial.marks(run)
    facts = {
        "dataset": run.dataset.name,
        "run": run.pk,
        "window": run.window,
        "scraper_version": run.scraper_version,
        "schema_version": run.schema_version,
        "spec_sha256": run.dataset.spec_sha256,
        "fields": types,
        **marks.as_dict(),
    }
    return typed_schema(export_rows.PROVENANCE, types, export_rows.rows_queryset(run), facts)


def typed_schema(
    leading: tuple[str, ...] | list[str],
    types: dict[str, str],
    rows: QuerySet[Any],
    facts: dict[str, Any],
) -> pa.Schema:
    """The leading provenance columns (strings, `version` an int64), then each field typed by
    its spec type (decimal scales from `rows`), with `facts` as the `salvage` metadata."""
    scales = decimal_scales(rows, [name for name, kind in types.items() if kind == "decimal"])
    columns = [pa.field(name, pa.int64() if name == "version" else pa.string()) for name in leading]
    for name, kind in types.items():
        if kind == "decimal":
            if scales[name] > DECIMAL_PRECISION:
                raise export_rows.ExportError(
                    f"field {name}: a value has {scales[name]} digits after the point, more "
                    f"than Parquet's {DECIMAL_PRECISION}"
                )
            arrow_type = pa.decimal128(DECIMAL_PRECISION, scales[name])
        else:
            arrow_type = _SIMPLE_TYPES.get(kind, pa.string())
        columns.append(pa.field(name, arrow_type))
    return pa.schema(columns, metadata={"salvage": json.dumps(facts, sort_keys=True)})


class _Unconvertible(ValueError):
    pass


def _text(value: Any) -> str | None:
    return None if value is None else export_rows.cell(value)


def _int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Unconvertible
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        return int(value)
    raise _Unconvertible


def _bool(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _Unconvertible


def _timestamp(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Unconvertible
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise _Unconvertible from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def _decimal(scale: int) -> Callable[[Any], Decimal | None]:
    quantum = Decimal(1).scaleb(-scale)
    # Exact or refused: a value with more digits than the column keeps is an error, not rounded.
    context = Context(prec=DECIMAL_PRECISION, traps=[Inexact, InvalidOperation])

    def convert(value: Any) -> Decimal | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _Unconvertible
        try:
            number = Decimal(str(value).strip())
            if not number.is_finite():
                raise _Unconvertible
            return number.quantize(quantum, context=context)
        except (InvalidOperation, ArithmeticError):
            raise _Unconvertible from None

    return convert


def _converter(arrow_type: pa.DataType) -> Callable[[Any], Any]:
    if pa.types.is_decimal(arrow_type):
        return _decimal(arrow_type.scale)
    if pa.types.is_int64(arrow_type):
        return _int
    if pa.types.is_boolean(arrow_type):
        return _bool
    if pa.types.is_timestamp(arrow_type):
        return _timestamp
    return _text


class _Sink:
    """A write-only file for pyarrow's writer that hands its bytes on instead of storing them:
    `take()` returns what was written since the last call."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        self._size += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self._size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def stream(run: Run) -> Iterator[bytes]:
    """The run's Parquet file as byte chunks, one or more per row group (the run was checked
    exportable by the caller, exports.stream_bytes). The schema is built before the first byte,
    so a decimal column too wide is refused before any output."""
    file_schema = schema(run)
    marks = partial.marks(run)
    return written(
        file_schema,
        lambda: export_rows.rows(run),
        leading=len(export_rows.PROVENANCE),
        constants=[marks.stopped_reason, marks.coverage_note],
    )


def written(
    file_schema: pa.Schema,
    rows: Callable[[], Iterable[tuple[Any, ...]]],
    *,
    leading: int,
    constants: list[Any],
) -> Iterator[bytes]:
    """The file's bytes, a row group at a time. `rows()` yields (*stored columns, payload
    text), read inside export_rows.cursor_scope; the stored columns are followed by
    `constants` (the same value on every row) to make the `leading` columns, then the fields."""
    fields = list(file_schema)
    stored = leading - len(constants)
    names = [field.name for field in fields[leading:]]
    converters = [_converter(field.type) for field in fields[leading:]]
    sink = _Sink()
    writer = pq.ParquetWriter(sink, file_schema, compression=COMPRESSION)
    columns: list[list[Any]] = [[] for _ in fields]
    size = 0

    def flush() -> bytes:
        nonlocal columns, size
        arrays = [pa.array(values, type=f.type) for values, f in zip(columns, fields, strict=True)]
        writer.write_table(pa.Table.from_arrays(arrays, schema=file_schema), ROW_GROUP_ROWS)
        columns = [[] for _ in fields]
        size = 0
        return sink.take()

    try:
        with export_rows.cursor_scope():
            for *prov, payload_text in rows():
                payload = json.loads(payload_text) if payload_text else {}
                if not isinstance(payload, dict):
                    payload = {}
                for i, value in enumerate(prov):
                    columns[i].append(value)
                for i, value in enumerate(constants, start=stored):
                    columns[i].append(value)
                for i, (name, convert) in enumerate(
                    zip(names, converters, strict=True), start=leading
                ):
                    value = payload.get(name)
                    try:
                        columns[i].append(convert(value))
                    except _Unconvertible:
                        raise export_rows.ExportError(
                            f"field {name} of observation {prov[0]}: {value!r} is not a "
                            f"{fields[i].type} value"
                        ) from None
                size += 1
                if size >= ROW_GROUP_ROWS:
                    yield flush()
            if size:
                yield flush()
    finally:
        writer.close()
    yield sink.take()
