"""Exports: only accepted observations, formula cells neutralised, stable columns, streaming."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from recovery import acceptance, exports
from recovery.models import Observation
from tests.acceptance_factories import make_collected_run

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
