"""Shared by the upload tests (database and browser): bad inputs, the command line's own
message for them, and a count of every table's rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError

ROOT = Path(__file__).resolve().parents[2]
SHOP_SPEC = ROOT / "examples" / "shop.toml"
SHOP_MANIFEST = ROOT / "examples" / "shop-manifest.csv"

# A typo that must not silently make a field optional, on line 8.
BAD_SPEC = """name = "typo"
provider = "direct"

[page_types.product]
expect = { selector = "div.product" }

[page_types.product.fields]
sku = { selector = "[data-sku]", requried = true }
"""
BAD_SPEC_LINE = 8

# Twelve bad lines (the first ten are listed, the rest counted) among good ones.
BAD_MANIFEST = "url,page_type,priority\n" + "".join(
    f"http://shop.test/product/{i},product,0\n"
    if i % 3
    else f"ftp://shop.test/product/{i},product,0\n"
    if i % 2
    else f"http://shop.test/product/{i},product,high\n"
    for i in range(36)
)


def table_counts() -> dict[str, int]:
    """Rows in every table of the product and of django-q2 (the queue's wake-ups)."""
    counted = {}
    for label in ("recovery", "django_q", "auth"):
        for model in apps.get_app_config(label).get_models():
            counted[model._meta.db_table] = model.objects.count()
    return counted


def command_error(*args: str, cwd: Path, monkeypatch) -> str:
    """What the command line says (CommandError's message), run from `cwd` so the file is
    named as an upload names it: by its own name."""
    monkeypatch.chdir(cwd)
    with pytest.raises(CommandError) as refused:
        call_command(*args)
    assert refused.value.returncode == 2
    return str(refused.value)
