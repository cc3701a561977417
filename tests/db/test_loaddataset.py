"""manage.py loaddataset: create or update by name; bad specs exit 2 and write nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from recovery import specs
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
