"""Parquet exports: typed columns equal to the CSV row for row, stable bytes, row groups while
streaming, and the run's partial-result marks in every format and in its announcement."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from recovery.delivery import export_rows, exports, parquet
from recovery.models import Attempt, Observation, OutboxEvent, RemoteJob, Task
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run, make_shop

pytestmark = pytest.mark.django_db

TYPED_FIELDS = {
    "reviews": {"selector": ".reviews", "type": "int", "required": False},
    "in_stock": {"selector": ".stock", "type": "bool", "required": False},
    "seen": {"selector": "time", "attr": "datetime", "type": "timestamp", "required": False},
}
# What the extra fields hold, row by row: every type, nulls, and values CSV would neutralise.
EXTRA = [
    {"reviews": 12, "in_stock": True, "seen": "2026-11-30T10:15:00+01:00", "title": "=1+2"},
    {"reviews": "7", "in_stock": "false", "seen": "2026-12-01T00:00:00Z", "price": "3.125"},
    {"reviews": None, "in_stock": None, "seen": None, "title": 'ünïcødé, "quoted"\nline'},
    {"price": 1234567.5, "title": "@SUM(A1)"},
]


def typed_run(rows: int = len(EXTRA)):
    dataset = make_shop()
    dataset.spec["page_types"]["product"]["fields"].update(TYPED_FIELDS)
    dataset.save(update_fields=["spec"])
    run = make_collected_run({"a": "good"}, per_partition=rows, dataset=dataset)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    observations = list(Observation.objects.filter(run=run).order_by("pk"))
    for obs, extra in zip(observations, EXTRA * (rows // len(EXTRA) + 1), strict=False):
        Observation.objects.filter(pk=obs.pk).update(payload={**obs.payload, **extra})
    return run


def parquet_bytes(run) -> bytes:
    return b"".join(exports.stream_bytes(run.pk, "parquet"))


def csv_rows(run) -> list[dict[str, str]]:
    text = "".join(exports.stream(run.pk, "csv"))
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_it_writes_typed_columns_equal_to_the_csv_row_for_row():
    run = typed_run()
    table = pq.read_table(io.BytesIO(parquet_bytes(run)))
    assert table.column_names == exports.columns(run)
    types = {field.name: field.type for field in table.schema}
    assert types["version"] == pa.int64()
    assert types["observation_key"] == pa.string()
    assert types["stopped_reason"] == pa.string()
    assert types["price"] == pa.decimal128(38, 3)  # the widest scale among the values: 3.125
    assert types["reviews"] == pa.int64()
    assert types["in_stock"] == pa.bool_()
    assert types["seen"] == pa.timestamp("us", tz="UTC")
    assert types["title"] == pa.string()

    rows = table.to_pylist()
    expected = csv_rows(run)
    assert len(rows) == len(expected) == len(EXTRA)
    for row, cells in zip(rows, expected, strict=True):
        assert set(row) == set(cells)
        for name, value in row.items():
            cell = cells[name]
            if value is None:
                assert cell == "", name
            elif isinstance(value, bool):
                assert cell == ("true" if value else "false"), name
            elif isinstance(value, Decimal):
                assert value == Decimal(cell), name
            elif isinstance(value, int):
                assert value == int(cell), name
            elif isinstance(value, dt.datetime):
                assert value == dt.datetime.fromisoformat(cell).astimezone(dt.UTC), name
            else:
                # Parquet keeps the value; the CSV cell is that value, neutralised for spreadsheets.
                assert exports.neutralise(value) == cell, name
    assert rows[0]["title"] == "=1+2"
    assert rows[0]["seen"] == dt.datetime(2026, 11, 30, 9, 15, tzinfo=dt.UTC)
    assert rows[1]["reviews"] == 7 and rows[1]["in_stock"] is False
    assert rows[3]["price"] == Decimal("1234567.500")


def test_two_exports_of_the_same_run_are_byte_identical_and_a_correction_changes_them():
    run = typed_run()
    first = parquet_bytes(run)
    assert parquet_bytes(run) == first
    metadata = pq.ParquetFile(io.BytesIO(first)).schema_arrow.metadata
    facts = json.loads(metadata[b"salvage"])
    assert facts["run"] == run.pk and facts["fields"]["reviews"] == "int"
    obs = Observation.objects.filter(run=run).order_by("pk").first()
    Observation.objects.filter(pk=obs.pk).update(payload={**obs.payload, "reviews": 13})
    assert parquet_bytes(run) != first


def test_it_streams_row_groups_as_rows_are_read(monkeypatch):
    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 3)
    run = typed_run(rows=10)
    read = []
    real_rows = export_rows.rows

    def counting(run):
        for row in real_rows(run):
            read.append(row)
            yield row

    monkeypatch.setattr(export_rows, "rows", counting)
    seen_when_first_chunk = None
    chunks = []
    for chunk in exports.stream_bytes(run.pk, "parquet"):
        if seen_when_first_chunk is None and chunk:
            seen_when_first_chunk = len(read)
        chunks.append(chunk)
    assert seen_when_first_chunk is not None and seen_when_first_chunk < 10
    whole = pq.ParquetFile(io.BytesIO(b"".join(chunks)))
    assert whole.metadata.num_row_groups == 4  # 3 + 3 + 3 + 1
    assert whole.metadata.num_rows == 10


def test_a_value_that_does_not_fit_its_column_stops_the_export_naming_it():
    run = typed_run()
    obs = Observation.objects.filter(run=run).order_by("pk").first()
    Observation.objects.filter(pk=obs.pk).update(payload={**obs.payload, "reviews": "many"})
    with pytest.raises(exports.ExportError, match=r"field reviews of observation .*'many'"):
        parquet_bytes(run)


def test_partial_results_travel_in_every_format_and_in_the_announcement():
    run = make_collected_run({"a": "good"}, per_partition=2)
    task = Task.objects.filter(run=run).first()
    attempt = Attempt.objects.create(task=task, run=run, worker="w", outcome="committed")
    RemoteJob.objects.create(
        attempt=attempt,
        run=run,
        provider="messora",
        kind="search",
        state="completed",
        stopped_reason="token_cap",
    )
    note = "messora search job j-1 stopped early (token_cap): its results are incomplete"
    type(run).objects.filter(pk=run.pk).update(coverage_note=note)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    for row in csv_rows(run):
        assert row["stopped_reason"] == "token_cap" and row["coverage_note"] == note
    for line in "".join(exports.stream(run.pk, "jsonl")).splitlines():
        assert json.loads(line)["stopped_reason"] == "token_cap"
    table = pq.read_table(io.BytesIO(parquet_bytes(run)))
    assert set(table.column("coverage_note").to_pylist()) == {note}
    facts = json.loads(table.schema.metadata[b"salvage"])
    assert facts["stopped_reason"] == "token_cap" and facts["coverage_note"] == note
    event = OutboxEvent.objects.get(run=run, event_type="accepted")
    assert event.payload["stopped_reason"] == "token_cap"
    assert event.payload["coverage_note"] == note


def test_the_command_writes_parquet_to_a_file_and_refuses_a_text_stdout(tmp_path):
    run = typed_run()
    target = tmp_path / "out.parquet"
    out = io.StringIO()
    call_command("export", str(run.pk), "--format", "parquet", "--output", str(target), stdout=out)
    assert target.read_bytes() == parquet_bytes(run)
    with pytest.raises(CommandError) as err:
        call_command("export", str(run.pk), "--format", "parquet", stdout=io.StringIO())
    assert err.value.returncode == 2
    binary = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    call_command("export", str(run.pk), "--format", "parquet", stdout=binary)
    assert binary.buffer.getvalue() == parquet_bytes(run)
