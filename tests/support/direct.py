"""Specs, manifests and runs for direct-provider tests against the sandbox shop.

The spec is the one docs/spec-format.md describes, adapted to the sandbox's markup, and goes
through recovery.intake.specs like an operator's file would; runs go through manifests.create_run.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from recovery.intake import manifests, specs

SHOP_SPEC: dict[str, Any] = {
    "name": "shop",
    "provider": "direct",
    "max_attempts": 5,
    "entity_key": {"field": "sku"},
    "partition": {"rule": "host"},
    # Short timeouts: the sandbox's slow page answers after 3 s and its trickling page takes
    # 5 s; both must fail their first attempt here.
    "provider_options": {
        "concurrency": 16,
        "per_host": 16,
        "read_timeout": 1.0,
        "deadline": 2.0,
        "max_bytes": 1_000_000,
    },
    "default_page_type": "product",
    "page_types": {
        "product": {
            "expect": {"selector": "div.product"},
            "consent": {"selector": "#consent-banner"},
            "login": {"selector": "form#login"},
            "challenge": {"text": "verify you are (a )?human"},
            "empty_shell": {"min_text_chars": 40},
            "fields": {
                "title": {"selector": "h1", "required": True},
                "price": {"selector": ".price", "type": "decimal", "required": True},
                "sku": {"selector": "[data-sku]", "attr": "data-sku", "required": True},
                "in_stock": {"selector": ".stock", "attr": "data-in-stock", "type": "bool"},
                "reviews": {"selector": ".reviews", "type": "int"},
                "retailer": {"selector": "[data-retailer]", "attr": "data-retailer"},
            },
        },
        "listing": {
            "expect": {"selector": "div.listing"},
            "cursor": {"selector": "a.next", "attr": "href"},
            "links": {"selector": "a.product-link", "page_type": "product", "max_depth": 1},
        },
        "categories": {
            "expect": {"selector": "main"},
            "links": {
                "selector": "a.category-link",
                "page_type": "category",
                "max_depth": 1,
                "allow": ["/category/"],
            },
        },
        "category": {
            "expect": {"selector": "div.listing"},
            "links": {
                "selector": "a.product-link",
                "page_type": "product",
                "max_depth": 2,
                "allow": ["/product/[0-9]+$"],
            },
        },
    },
}


def shop_spec(name: str = "shop", **overrides: Any) -> dict[str, Any]:
    """The normalised spec (through specs.validate), with top-level overrides."""
    raw = copy.deepcopy(SHOP_SPEC)
    raw["name"] = name
    for key, value in overrides.items():
        if key == "provider_options":
            raw["provider_options"] = {**raw["provider_options"], **value}
        else:
            raw[key] = value
    return specs.validate(raw)


def load_shop(name: str = "shop", **overrides: Any):
    dataset, _ = specs.save_dataset(shop_spec(name, **overrides))
    return dataset


def create_run(
    dataset_name: str,
    rows: list[tuple[str, str]],
    tmp_path: Path,
    window: str = "2026-11-29",
):
    """A run from (url, page_type) rows, through the real manifest path."""
    path = tmp_path / f"manifest-{dataset_name}-{window}.csv"
    lines = ["url,page_type", *[f"{url},{page_type}" for url, page_type in rows]]
    path.write_text("\n".join(lines) + "\n")
    return manifests.create_run(dataset_name, window, path).run
