"""The spec line an upload's error points at (dashboard.speclines)."""

from __future__ import annotations

import pytest

from dashboard.speclines import locate

SPEC = """name = "shop"
provider = "direct"

[page_types.product]
expect = { selector = "div.product" }

[page_types.product.fields]
sku = { selector = "[data-sku]", requried = true }
price.selector = ".price"

[[rules]]
name = "coverage"
kind = "coverage"

[[rules]]
name = "price_positive"
kind = "range"
"""


@pytest.mark.parametrize(
    "message,line",
    [
        ("x.toml: page_types.product.fields.sku.requried: unknown key (allowed: ...)", 8),
        ("x.toml: page_types.product.expect.selector: must be a non-empty string", 5),
        ("x.toml: page_types.product.fields.price.selector: bad selector", 9),
        ("x.toml: rules[1].kind: unknown rule kind", 17),
        ("x.toml: provider: unknown provider 'ftp'", 2),
        ("x.toml: invalid TOML: Expected '=' (at line 3, column 5)", 3),
        ("x.json: invalid JSON at line 7: Expecting ',' delimiter", 7),
    ],
)
def test_it_finds_the_line_an_error_is_about(message, line):
    assert locate(SPEC, message) == line


def test_it_says_nothing_when_the_key_is_not_in_the_file():
    assert locate(SPEC, "x.toml: entity_key: required") is None
    assert locate(SPEC, "x.toml: the top level must be a table/object") is None
