"""Each entity's latest published value across windows (recovery.delivery.latest): kept by
publication, updated by a correction, exported by `manage.py export DATASET --latest`."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command

from recovery.delivery import latest
from recovery.models import AuditEntry, LatestObservation, Run, Task
from recovery.quality import acceptance
from tests.support.acceptance import commit_task, make_shop
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def product(sku: str, price: str) -> dict:
    return {"title": f"Item {sku}", "price": price, "sku": sku}


def published(dataset, window: str, prices: dict[str, str], *, bad: tuple = ()) -> Run:
    """A published run of `window` whose tasks committed {sku: price} (one task per sku, the
    skus in `bad` in a partition of their own with a zero price, so it is held)."""
    run = make_run(dataset, window=window)
    for sku, price in prices.items():
        partition = "bad" if sku in bad else "shop"
        (task,) = make_tasks(run, 1, partition=partition, host=f"{partition}.test")
        commit_task(task, product(sku, price))
    assert acceptance.make_candidate(run.pk)
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    return run


def lenient():
    dataset = make_shop()
    dataset.spec["rules"][0]["min"] = 0.5  # coverage: a held partition does not block
    dataset.save(update_fields=["spec"])
    return dataset


def exported(dataset, fmt: str) -> str:
    out = io.StringIO()
    call_command("export", dataset.name, "--latest", "--format", fmt, stdout=out)
    return out.getvalue()


def three_windows():
    dataset = lenient()
    w1 = published(dataset, "2026-11-28", {"SKU-1": "10.00", "SKU-2": "20.00", "SKU-3": "30.00"})
    w2 = published(dataset, "2026-11-29", {"SKU-1": "11.00", "SKU-2": "21.00", "SKU-3": "31.00"})
    # SKU-2 is missing from the last window.
    w3 = published(dataset, "2026-11-30", {"SKU-1": "12.00", "SKU-3": "32.00"})
    return dataset, (w1, w2, w3)


def test_an_entity_missing_from_the_last_window_keeps_its_window_2_value():
    dataset, (_w1, w2, w3) = three_windows()
    rows = {row.entity_key: row for row in latest.latest_rows(dataset)}
    assert {k: (r.window, r.payload["price"]) for k, r in rows.items()} == {
        "SKU-1": ("2026-11-30", "12.00"),
        "SKU-2": ("2026-11-29", "21.00"),
        "SKU-3": ("2026-11-30", "32.00"),
    }
    assert rows["SKU-2"].run_id == w2.pk and rows["SKU-1"].run_id == w3.pk

    lines = list(csv.DictReader(io.StringIO(exported(dataset, "csv"))))
    assert [(r["entity_key"], r["window"], r["price"]) for r in lines] == [
        ("SKU-1", "2026-11-30", "12.00"),
        ("SKU-2", "2026-11-29", "21.00"),
        ("SKU-3", "2026-11-30", "32.00"),
    ]
    assert list(lines[0]) == [*latest.COLUMNS, "price", "sku", "title"]
    objects = [json.loads(line) for line in exported(dataset, "jsonl").splitlines()]
    assert objects[1]["entity_key"] == "SKU-2" and objects[1]["window"] == "2026-11-29"
    assert objects[1]["payload"] == product("SKU-2", "21.00")
    assert objects[1]["version"] == 1


def test_the_jsonl_is_the_same_bytes_on_both_databases():
    dataset, (_w1, w2, _w3) = three_windows()
    task_key = Task.objects.get(run=w2, url__endswith="/item/1").task_key
    line = exported(dataset, "jsonl").splitlines()[1]
    row = LatestObservation.objects.get(dataset=dataset, entity_key="SKU-2")
    assert line == (
        f'{{"observation_key": "{row.observation_key}", "entity_key": "SKU-2", '
        f'"window": "2026-11-29", "partition": "shop", "source_task_key": "{task_key}", '
        '"scraper_version": "1", "version": 1, '
        '"payload": {"sku": "SKU-2", "price": "21.00", "title": "Item SKU-2"}}'
    )


def test_a_correction_after_publication_updates_the_latest_value():
    dataset, (_w1, w2, w3) = three_windows()
    # Window 2 is re-collected after its publication: SKU-2's page now says 25.00.
    task = Task.objects.get(run=w2, url__endswith="/item/1")
    commit_task(task, product("SKU-2", "25.00"))
    row = LatestObservation.objects.get(dataset=dataset, entity_key="SKU-2")
    assert (row.window, row.payload["price"], row.version) == ("2026-11-29", "25.00", 2)
    assert '"price": "25.00"' in exported(dataset, "jsonl").splitlines()[1]
    # A correction of an older window's value leaves a later window's value alone.
    old = Task.objects.get(run=w2, url__endswith="/item/0")
    commit_task(old, product("SKU-1", "99.00"))
    row = LatestObservation.objects.get(dataset=dataset, entity_key="SKU-1")
    assert (row.run_id, row.payload["price"], row.version) == (w3.pk, "12.00", 1)


def test_a_backfilled_older_window_does_not_replace_a_later_value():
    dataset, _ = three_windows()
    published(dataset, "2026-11-01", {"SKU-1": "1.00", "SKU-4": "4.00"})
    rows = {
        row.entity_key: (row.window, row.payload["price"]) for row in latest.latest_rows(dataset)
    }
    assert rows["SKU-1"] == ("2026-11-30", "12.00")
    assert rows["SKU-4"] == ("2026-11-01", "4.00")  # an entity only it has is still the latest


def test_held_and_invalid_rows_never_become_the_latest_value():
    dataset = lenient()
    published(dataset, "2026-11-28", {"SKU-1": "10.00", "SKU-9": "9.00"})
    published(
        dataset,
        "2026-11-29",
        {"SKU-1": "11.00", "SKU-2": "12.00", "SKU-9": "0.00"},
        bad=("SKU-9",),
    )
    rows = {
        row.entity_key: (row.window, row.payload["price"]) for row in latest.latest_rows(dataset)
    }
    assert rows == {
        "SKU-1": ("2026-11-29", "11.00"),
        "SKU-2": ("2026-11-29", "12.00"),
        "SKU-9": ("2026-11-28", "9.00"),  # its window-2 row is held with its partition
    }


def test_an_accepted_run_is_not_the_latest_until_published():
    dataset = lenient()
    run = make_run(dataset, window="2026-11-28")
    (task,) = make_tasks(run, 1, partition="shop")
    commit_task(task, product("SKU-1", "10.00"))
    acceptance.make_candidate(run.pk)
    acceptance.accept_run(run.pk, "admin")
    assert not latest.latest_rows(dataset).exists()
    assert exported(dataset, "csv").splitlines() == [
        ",".join(f'"{c}"' for c in (*latest.COLUMNS, "price", "sku", "title"))
    ]


def test_the_command_names_what_it_cannot_export(tmp_path):
    dataset, _ = three_windows()
    with pytest.raises(CommandError, match="dataset 'nope' does not exist") as refused:
        call_command("export", "nope", "--latest", "--format", "csv")
    assert refused.value.returncode == 2
    target = tmp_path / "latest.csv"
    out = io.StringIO()
    call_command("export", dataset.name, "--latest", "--output", str(target), stdout=out)
    assert target.read_text().count("\n") == 4
    assert f"dataset {dataset.name} latest: wrote {target}" in out.getvalue()
    entry = AuditEntry.objects.get(action="export_command")
    assert (entry.object_type, entry.object_id) == ("dataset", str(dataset.pk))
    assert entry.detail == {"format": "csv", "output": str(target.resolve()), "latest": True}


def test_the_latest_values_as_parquet_equal_the_csv_row_for_row_with_typed_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset, _ = three_windows()
    dataset.spec["page_types"]["product"]["fields"]["price"]["type"] = "decimal"
    dataset.save(update_fields=["spec"])
    target = tmp_path / "latest.parquet"
    call_command(
        "export", dataset.name, "--latest", "--format", "parquet", "--output", str(target),
        stdout=io.StringIO(),
    )  # fmt: skip
    table = pq.read_table(target)
    assert table.schema.field("price").type == pa.decimal128(38, 2)
    assert table.schema.field("version").type == pa.int64()
    assert json.loads(table.schema.metadata[b"salvage"])["view"] == "latest"
    as_text = [{k: str(v) for k, v in row.items()} for row in table.to_pylist()]
    assert as_text == list(csv.DictReader(io.StringIO(exported(dataset, "csv"))))
    # The same rows, the same bytes (so a client can compare downloads).
    assert b"".join(latest.stream_bytes(dataset.name, "parquet")) == target.read_bytes()


def test_parquet_is_refused_on_a_text_stream():
    dataset, _ = three_windows()
    with pytest.raises(CommandError, match="--format parquet is binary") as refused:
        call_command(
            "export", dataset.name, "--latest", "--format", "parquet", stdout=io.StringIO()
        )
    assert refused.value.returncode == 2
