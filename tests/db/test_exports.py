"""Exports: only accepted observations, formula cells neutralised, stable columns, streaming."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from recovery.delivery import exports
from recovery.models import AuditEntry, Observation
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run

pytestmark = pytest.mark.django_db

FORMULAS = ['=HYPERLINK("http://x")', "+1+2", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]


def accepted_run(per_partition: int = 3):
    run = make_collected_run({"a": "good"}, per_partition=per_partition)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    return run


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        *[(f, "'" + f) for f in FORMULAS],
        ("plain", "plain"),
        ("", ""),
        ("a=b", "a=b"),
    ],
)
def test_it_neutralises_formula_cells(cell, expected):
    assert exports.neutralise(cell) == expected


def test_it_exports_provenance_then_sorted_fields_with_formulas_neutralised():
    run = accepted_run(per_partition=len(FORMULAS))
    for obs, formula in zip(
        Observation.objects.filter(run=run).order_by("pk"), FORMULAS, strict=True
    ):
        Observation.objects.filter(pk=obs.pk).update(payload={**obs.payload, "title": formula})
    text = "".join(exports.stream(run.pk, "csv"))
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == [*exports.PROVENANCE, "price", "sku", "title"]
    assert [r[-1] for r in rows[1:]] == ["'" + f for f in FORMULAS]
    obs = Observation.objects.filter(run=run).select_related("source_task").order_by("pk").first()
    first = dict(zip(rows[0], rows[1], strict=True))
    assert first["observation_key"] == obs.observation_key
    assert first["entity_key"] == obs.entity_key
    assert first["window"] == run.window
    assert first["source_task_key"] == obs.source_task.task_key
    assert first["scraper_version"] == obs.scraper_version
    assert first["version"] == "1"


def test_it_exports_jsonl_with_the_stored_payload():
    run = accepted_run()
    lines = "".join(exports.stream(run.pk, "jsonl")).splitlines()
    assert len(lines) == 3
    row = json.loads(lines[0])
    obs = Observation.objects.filter(run=run).order_by("pk").first()
    assert row["observation_key"] == obs.observation_key
    assert row["payload"] == obs.payload


def test_it_streams_in_chunks(monkeypatch):
    monkeypatch.setattr(exports, "FLUSH_BYTES", 200)
    run = accepted_run(per_partition=20)
    chunks = list(exports.stream(run.pk, "csv"))
    assert len(chunks) > 5
    assert len(list(csv.reader(io.StringIO("".join(chunks))))) == 21


def test_it_refuses_runs_that_are_not_accepted_and_unknown_formats():
    run = make_collected_run({"a": "good"}, per_partition=2)
    with pytest.raises(exports.ExportError, match="collecting"):
        exports.stream(run.pk, "csv")
    acceptance.advance_runs()
    with pytest.raises(exports.ExportError, match="candidate"):
        exports.stream(run.pk, "jsonl")
    acceptance.accept_run(run.pk, "admin")
    with pytest.raises(exports.ExportError, match="format"):
        exports.stream(run.pk, "xlsx")
    with pytest.raises(exports.ExportError, match="does not exist"):
        exports.stream(987654, "csv")


def test_the_command_writes_a_whole_file_and_takes_a_dataset_name(tmp_path):
    run = accepted_run()
    target = tmp_path / "out.csv"
    out = io.StringIO()
    call_command("export", str(run.pk), "--format", "csv", "--output", str(target), stdout=out)
    assert "wrote" in out.getvalue()
    assert len(target.read_text().splitlines()) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    out = io.StringIO()
    call_command("export", run.dataset.name, "--format", "jsonl", stdout=out)
    assert len(out.getvalue().splitlines()) == 3


def test_each_export_the_command_writes_is_audited_and_a_refused_one_is_not(tmp_path):
    run = accepted_run()
    target = tmp_path / "out.csv"
    call_command(
        "export", str(run.pk), "--output", str(target), "--actor", "dora", stdout=io.StringIO()
    )
    entry = AuditEntry.objects.get(action="export_command")
    assert (entry.actor, entry.object_type, entry.object_id) == ("dora", "run", str(run.pk))
    assert entry.detail == {"format": "csv", "output": str(target.resolve())}
    call_command("export", run.dataset.name, "--format", "jsonl", stdout=io.StringIO())
    latest = AuditEntry.objects.filter(action="export_command").latest("pk")
    assert latest.actor.startswith("cli:") and latest.detail["output"] == "stdout"
    with pytest.raises(CommandError):
        call_command("export", "no-such-dataset", "--format", "csv")
    assert AuditEntry.objects.filter(action="export_command").count() == 2


def test_the_command_exits_2_on_bad_input(tmp_path):
    run = make_collected_run({"a": "good"}, per_partition=2)
    with pytest.raises(CommandError) as err:
        call_command("export", str(run.pk), "--format", "csv")
    assert err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("export", "no-such-dataset", "--format", "csv")
    assert err.value.returncode == 2
    with pytest.raises(CommandError) as err:
        call_command("export", "1", "--output", str(tmp_path / "missing" / "x.csv"))
    assert err.value.returncode == 2


TRICKY = [
    {"title": '=cmd|"/c calc"!A1', "price": "-1.5", "sku": "SKU-1"},
    {"title": 'a "quoted", comma\nnewline', "price": 12, "sku": "@SKU-2"},
    {"title": "ünïcødé ✓", "price": None, "sku": "\tSKU-3"},
    {"title": True, "price": 1.25, "sku": {"nested": [1, 2]}},
]


def test_postgres_renders_the_same_rows_as_the_python_path(postgres_only):
    run = accepted_run(per_partition=len(TRICKY))
    for obs, payload in zip(
        Observation.objects.filter(run=run).order_by("pk"), TRICKY, strict=True
    ):
        Observation.objects.filter(pk=obs.pk).update(payload=payload)
    sql_csv = "".join(exports._pg_lines(run, "csv"))
    py_csv = "".join(exports._csv(run))
    assert list(csv.reader(io.StringIO(sql_csv, newline=""))) == list(
        csv.reader(io.StringIO(py_csv, newline=""))
    )
    assert sql_csv == py_csv  # byte for byte, quoting included
    sql_jsonl = [json.loads(x) for x in "".join(exports._pg_lines(run, "jsonl")).splitlines()]
    py_jsonl = [json.loads(x) for x in "".join(exports._jsonl(run)).splitlines()]
    assert sql_jsonl == py_jsonl
    assert [r["payload"] for r in sql_jsonl] == TRICKY


# Payloads whose text differs between the databases unless the export renders it itself:
# insertion order vs jsonb's key order, floats, nested objects, escapes, non-ASCII keys.
BYTE_PAYLOADS = [
    {"title": "Widget", "sku": "W-1", "price": 1234.5},
    {"zeta": 1, "a": {"yy": [1, {"b": None, "a": True}], "x": 'é\u001f"\\'}, "aé": 0.1},
    {"price": 1e-07, "big": 1e20, "neg": -0.0, "int": 12345678901234567890, "s": "\u2028"},
    {},
]
# What each payload renders as in the JSONL file, on either database: the expected bytes.
BYTE_TEXTS = [
    '{"sku": "W-1", "price": 1234.5, "title": "Widget"}',
    '{"a": {"x": "é\\u001f\\"\\\\", "yy": [1, {"a": true, "b": null}]}, "aé": 0.1, "zeta": 1}',
    '{"s": "\u2028", "big": 100000000000000000000, "int": 12345678901234567890, '
    '"neg": 0.0, "price": 0.0000001}',
    "{}",
]


def test_jsonl_is_the_same_bytes_on_sqlite_and_postgresql():
    """One expected text for both databases: CI runs this on each, so the files are equal."""
    run = accepted_run(per_partition=len(BYTE_PAYLOADS))
    observations = list(Observation.objects.filter(run=run).order_by("pk"))
    for obs, payload in zip(observations, BYTE_PAYLOADS, strict=True):
        Observation.objects.filter(pk=obs.pk).update(payload=payload)
    expected = "".join(
        f'{{"observation_key": "{obs.observation_key}", "entity_key": "{obs.entity_key}", '
        f'"window": "{run.window}", "partition": "{obs.partition}", '
        f'"source_task_key": "{obs.source_task.task_key}", '
        f'"scraper_version": "{obs.scraper_version}", "version": 1, '
        f'"stopped_reason": "", "coverage_note": "", "payload": {text}}}\n'
        for obs, text in zip(observations, BYTE_TEXTS, strict=True)
    )
    text = "".join(exports.stream(run.pk, "jsonl"))
    assert text == expected
    assert "".join(exports._jsonl(run)) == expected  # the Python path, on either database
    lines = [json.loads(line) for line in text.split("\n")[:-1]]  # U+2028 is no line end
    assert [line["payload"] for line in lines] == BYTE_PAYLOADS


def test_jsonb_text_matches_postgresql_for_every_payload(postgres_only):
    from decimal import Decimal

    from django.db import connection

    with connection.cursor() as cursor:
        for payload in [*BYTE_PAYLOADS, *TRICKY]:
            cursor.execute("SELECT %s::jsonb::text", [json.dumps(payload)])
            rendered = cursor.fetchone()[0]
            assert exports.jsonb_text(json.loads(json.dumps(payload), parse_float=Decimal)) == (
                rendered
            )


# Values that need quoting or escaping (quotes, backslashes, CR/LF, tabs, control characters,
# non-ASCII, formula-looking cells) in the payload and in provenance: on PostgreSQL the SQL
# renders them (CSV through COPY, JSONL as bytes from a cursor), and the bytes must be those of
# the Python rendering.
RAW_VALUES = [
    {"title": 'say "hi", then \\ leave', "sku": "a\nb\r\nc", "price": "\t-1"},
    {"title": "\x01\x02\x1f\x7f", "sku": "ünïcødé ✓ 😀", "price": "=1+1", 'k\x01"\n': "v"},
    {"title": "", "sku": "\\\\N", "price": "\\."},
    {"title": "end\\", "sku": None, "price": "@x"},
]
RAW_PROVENANCE = [
    {"entity_key": '=e "1"', "partition": "+p\n", "scraper_version": "-v\x01"},
    {"entity_key": "e\\2\t", "partition": "@p\x02", "scraper_version": "\tv"},
    {"entity_key": "ë3 ✓", "partition": "\rp", "scraper_version": ""},
    {"entity_key": "e4", "partition": "p", "scraper_version": "1"},
]


def raw_run():
    run = accepted_run(per_partition=len(RAW_VALUES))
    observations = list(Observation.objects.filter(run=run).order_by("pk"))
    for obs, payload, provenance in zip(observations, RAW_VALUES, RAW_PROVENANCE, strict=True):
        Observation.objects.filter(pk=obs.pk).update(payload=payload, **provenance)
    return run


def test_raw_control_characters_quotes_and_unicode_export_the_same_bytes_everywhere():
    """stream() (COPY on PostgreSQL) equals the Python rendering byte for byte, on each
    database, and every JSONL line parses back to the stored values."""
    run = raw_run()
    for fmt, render in (("csv", exports._csv), ("jsonl", exports._jsonl)):
        text = "".join(exports.stream(run.pk, fmt))
        assert text == "".join(render(run)), fmt
        assert b"".join(exports.stream_bytes(run.pk, fmt)) == text.encode(), fmt
    lines = "".join(exports.stream(run.pk, "jsonl")).split("\n")
    assert lines[-1] == ""
    rows = [json.loads(line) for line in lines[:-1]]
    assert [r["payload"] for r in rows] == RAW_VALUES
    assert [
        {k: r[k] for k in ("entity_key", "partition", "scraper_version")} for r in rows
    ] == RAW_PROVENANCE
    cells = list(csv.reader(io.StringIO("".join(exports.stream(run.pk, "csv")), newline="")))
    header = cells[0]
    got = [dict(zip(header, row, strict=True)) for row in cells[1:]]
    assert [r["entity_key"] for r in got] == ['\'=e "1"', "e\\2\t", "ë3 ✓", "e4"]
    assert [r["partition"] for r in got] == ["'+p\n", "'@p\x02", "'\rp", "p"]
    assert [r["scraper_version"] for r in got] == ["'-v\x01", "'\tv", "", "1"]
    assert [r["price"] for r in got] == ["'\t-1", "'=1+1", "\\.", "'@x"]
    assert [r["sku"] for r in got] == ["a\nb\r\nc", "ünïcødé ✓ 😀", "\\\\N", ""]


def test_the_command_writes_the_same_bytes_to_a_binary_stdout_and_a_file(tmp_path):
    run = raw_run()
    for fmt in exports.TEXT_FORMATS:
        expected = "".join(exports.stream(run.pk, fmt)).encode()
        stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        call_command("export", str(run.pk), "--format", fmt, stdout=stdout)
        assert stdout.buffer.getvalue() == expected, fmt
        target = tmp_path / f"out.{fmt}"
        call_command("export", str(run.pk), "--format", fmt, "--output", str(target))
        assert target.read_bytes() == expected, fmt
