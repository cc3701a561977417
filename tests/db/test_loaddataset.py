"""manage.py loaddataset: create or update by name; bad specs exit 2 and write nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from recovery.intake import specs
from recovery.models import AuditEntry, Dataset

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shop.toml"


def load(path) -> str:
    out = io.StringIO()
    call_command("loaddataset", str(path), stdout=out)
    return out.getvalue()


def test_it_creates_a_dataset_from_the_example():
    assert "dataset shop created" in load(EXAMPLE)
    dataset = Dataset.objects.get(name="shop")
    assert dataset.provider == "direct"
    assert dataset.max_elapsed_seconds == 3600
    assert dataset.spec["default_page_type"] == "product"
    assert dataset.spec_sha256 == specs.spec_sha256(dataset.spec)
    assert AuditEntry.objects.filter(action="dataset_created").count() == 1


def test_loading_the_same_spec_again_changes_nothing():
    load(EXAMPLE)
    before = Dataset.objects.get(name="shop")
    assert "unchanged" in load(EXAMPLE)
    after = Dataset.objects.get(name="shop")
    assert (after.pk, after.updated_at, after.spec_sha256) == (
        before.pk,
        before.updated_at,
        before.spec_sha256,
    )
    assert Dataset.objects.count() == 1


def test_a_changed_spec_updates_the_dataset_by_name(tmp_path):
    load(EXAMPLE)
    before = Dataset.objects.get(name="shop")
    raw = specs.parse_file(EXAMPLE)
    raw["max_attempts"] = 9
    raw["auto_accept"] = True
    changed = tmp_path / "shop.json"
    changed.write_text(json.dumps(raw))
    assert "dataset shop updated" in load(changed)
    after = Dataset.objects.get(name="shop")
    assert after.pk == before.pk
    assert (after.max_attempts, after.auto_accept) == (9, True)
    assert after.spec_sha256 != before.spec_sha256
    entry = AuditEntry.objects.get(action="dataset_updated")
    assert entry.detail["previous_sha256"] == before.spec_sha256


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('name = "shop"\n', "page_types: required"),
        ('name = "shop"\n[page_types.p.fields]\nt = { selector = "h1", typ = "int" }\n', "typ"),
        ("name = [", "invalid TOML"),
    ],
)
def test_a_bad_spec_exits_2_naming_the_key_and_writes_nothing(tmp_path, content, message):
    load(EXAMPLE)
    before = list(Dataset.objects.values())
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(CommandError) as err:
        load(path)
    assert err.value.returncode == 2
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert list(Dataset.objects.values()) == before


def test_a_missing_file_exits_2(tmp_path):
    with pytest.raises(CommandError) as err:
        load(tmp_path / "nope.toml")
    assert err.value.returncode == 2
    assert "cannot read" in str(err.value)
    assert not Dataset.objects.exists()


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_an_integer_past_the_column_exits_2_naming_the_key_and_range(tmp_path, suffix):
    raw = specs.parse_file(EXAMPLE)
    raw["max_attempts"] = 10**23
    path = tmp_path / f"huge{suffix}"
    text = EXAMPLE.read_text().replace("max_attempts = 5", f"max_attempts = {10**23}")
    path.write_text(text if suffix == ".toml" else json.dumps(raw))
    with pytest.raises(CommandError) as err:
        load(path)
    assert err.value.returncode == 2
    assert f"max_attempts: must be between 1 and 2147483647, got {10**23}" in str(err.value)
    assert not Dataset.objects.exists()


@pytest.mark.parametrize(
    ("suffix", "rule"),
    [
        (".toml", '[[rules]]\nname = "cap"\nkind = "range"\nfield = "price"\nmax = inf\n'),
        (".toml", '[[rules]]\nname = "cap"\nkind = "range"\nfield = "price"\nmax = nan\n'),
        (".json", {"name": "cap", "kind": "range", "field": "price", "max": float("inf")}),
    ],
)
def test_an_infinite_rule_bound_exits_2_naming_the_rule_and_key(tmp_path, suffix, rule):
    path = tmp_path / f"inf{suffix}"
    if suffix == ".toml":
        path.write_text(EXAMPLE.read_text() + "\n" + rule)
    else:
        raw = specs.parse_file(EXAMPLE)
        raw["rules"].append(rule)
        path.write_text(json.dumps(raw))  # Infinity: Python's json reads and writes it
    with pytest.raises(CommandError) as err:
        load(path)
    assert err.value.returncode == 2
    assert "rules.cap.max: must be a finite number" in str(err.value)
    assert not Dataset.objects.exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("deep.json", '{"name": "shop", "a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("deep.toml", 'name = "shop"\na = ' + "[" * 5_000 + "]" * 5_000 + "\n"),
    ],
)
def test_a_spec_nested_too_deep_exits_2_naming_the_limit(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CommandError) as err:
        load(path)
    assert err.value.returncode == 2
    assert str(err.value) == f"{path}: nested deeper than 64 levels (tables and arrays)"
    assert not Dataset.objects.exists()


def test_a_spec_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "shop.toml"
    path.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes())
    assert "dataset shop created" in load(path)
    assert "unchanged" in load(EXAMPLE)  # the same spec: the mark is not part of it


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("description", "a\x00b", "description: contains a NUL character"),
        ("values", float("nan"), "rules.e.values[0]: must be a finite number, got nan"),
    ],
)
def test_what_postgresql_cannot_store_exits_2_and_writes_nothing(tmp_path, where, value, message):
    raw = specs.parse_file(EXAMPLE)
    if where == "values":
        raw["rules"].append({"name": "e", "kind": "enum", "field": "price", "values": [value]})
    else:
        raw[where] = value
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(CommandError) as err:
        load(path)
    assert err.value.returncode == 2
    assert message in str(err.value)
    assert not Dataset.objects.exists()


def test_diff_prints_the_change_against_the_stored_spec_and_stores_nothing(tmp_path):
    def diff(path) -> list[str]:
        out = io.StringIO()
        call_command("loaddataset", str(path), "--diff", stdout=out)
        return out.getvalue().splitlines()

    assert diff(EXAMPLE)[-1].startswith("dataset shop would be created (spec ")
    assert not Dataset.objects.exists()
    load(EXAMPLE)
    v1 = Dataset.objects.get(name="shop").spec_sha256
    assert diff(EXAMPLE) == [f"dataset shop unchanged (spec {v1[:12]})"]

    v2 = tmp_path / "shop.toml"
    v2.write_text(EXAMPLE.read_text().replace("max_attempts = 5", "max_attempts = 7"))
    lines = diff(v2)
    assert lines[:2] == [
        f"--- current {v1[:12]}",
        f"+++ new {specs.spec_sha256(specs.check_file(v2))[:12]}",
    ]
    assert '-  "max_attempts": 5,' in lines and '+  "max_attempts": 7,' in lines
    assert lines[-1].endswith("); nothing stored") and "would be updated" in lines[-1]
    assert Dataset.objects.get(name="shop").spec_sha256 == v1
    assert not AuditEntry.objects.filter(action="dataset_updated").exists()
