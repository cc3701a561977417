"""Dataset specs: the documented format loads; every mistake names its key."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path

import pytest

from recovery.intake import spec_rules, specs

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = {
    "name": "shop",
    "page_types": {"product": {"fields": {"sku": {"selector": "[data-sku]", "attr": "data-sku"}}}},
}


def documented_spec() -> dict:
    text = (ROOT / "docs" / "spec-format.md").read_text()
    block = re.search(r"```toml\n(.*?)```", text, re.S)
    assert block, "docs/spec-format.md lost its TOML example"
    return tomllib.loads(block.group(1))


def test_it_accepts_the_documented_example():
    spec = specs.validate(documented_spec())
    assert spec["name"] == "shop"
    assert list(spec["page_types"]) == ["product", "category", "listing"]
    assert spec["default_page_type"] == "product"
    assert spec["entity_key"] == {"field": "sku"}
    assert spec["page_types"]["product"]["fields"]["price"]["type"] == "decimal"
    assert spec["page_types"]["category"]["links"]["page_type"] == "product"
    assert [r["name"] for r in spec["rules"]][:2] == ["coverage", "price_positive"]


def test_it_accepts_the_example_in_the_repository():
    spec = specs.validate(specs.parse_file(ROOT / "examples" / "shop.toml"))
    assert spec["provider"] == "direct"


def test_it_accepts_the_spec_the_sandbox_writes():
    from recovery.sandbox.server import PARTITION_RULES, shop_spec_toml

    for rule in PARTITION_RULES:
        spec = specs.validate(tomllib.loads(shop_spec_toml(partition_rule=rule)))
        assert spec["partition"] == {"rule": rule}


def test_it_fills_in_defaults():
    spec = specs.validate(copy.deepcopy(MINIMAL))
    assert spec["provider"] == "direct"
    assert spec["scraper_version"] == "1"
    assert spec["auto_accept"] is False
    assert spec["lease_seconds"] is None
    assert spec["max_attempts"] == 5
    assert spec["entity_key"] == {"from": "url"}
    assert spec["partition"] == {"rule": "host"}
    assert spec["rules"] == []
    field = spec["page_types"]["product"]["fields"]["sku"]
    assert field == {
        "selector": "[data-sku]",
        "attr": "data-sku",
        "type": "text",
        "required": False,
    }


def test_the_same_spec_in_toml_and_json_has_one_hash(tmp_path):
    raw = documented_spec()
    (tmp_path / "a.json").write_text(json.dumps(raw))
    doc = (ROOT / "docs" / "spec-format.md").read_text()
    (tmp_path / "a.toml").write_text(re.search(r"```toml\n(.*?)```", doc, re.S).group(1))
    from_json = specs.validate(specs.parse_file(tmp_path / "a.json"))
    from_toml = specs.validate(specs.parse_file(tmp_path / "a.toml"))
    assert specs.spec_sha256(from_json) == specs.spec_sha256(from_toml)
    changed = copy.deepcopy(raw)
    changed["max_attempts"] = 6
    assert specs.spec_sha256(specs.validate(changed)) != specs.spec_sha256(from_toml)


def test_it_accepts_brackets_inside_quoted_attribute_values():
    raw = mutate("page_types.product.fields.sku.selector", 'a[href*="]"]')
    assert specs.validate(raw)["page_types"]["product"]["fields"]["sku"]["selector"]


def test_it_keeps_the_default_page_type_explicit():
    raw = copy.deepcopy(MINIMAL)
    raw["page_types"]["category"] = {"links": {"selector": "a", "page_type": "product"}}
    raw["default_page_type"] = "category"
    assert specs.validate(raw)["default_page_type"] == "category"


def mutate(path: str, value) -> dict:
    """MINIMAL with `value` set at a dotted path (value DELETE removes the key)."""
    raw = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return raw


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("name", DELETE, "name: required"),
        ("name", "has space", "name: 'has space' must be a slug"),
        ("name", 7, "name: must be a non-empty string"),
        ("provider", "scrapy", "provider: 'scrapy' is not one of"),
        ("auto_accept", "yes", "auto_accept: must be true or false"),
        ("max_attempts", 0, "max_attempts: must be >= 1"),
        ("max_attempts", True, "max_attempts: must be an integer"),
        ("lease_seconds", 1.5, "lease_seconds: must be an integer"),
        # Past the database column (a 32-bit integer): named, not an overflow at the INSERT.
        ("max_attempts", 10**23, "max_attempts: must be between 1 and 2147483647, got 1"),
        ("lease_seconds", 2**31, "lease_seconds: must be between 1 and 2147483647"),
        ("max_elapsed_seconds", 2**63, "max_elapsed_seconds: must be between 1 and 2147483647"),
        ("scraper_version", "", "scraper_version: must be a non-empty string"),
        ("colour", "red", "colour: unknown key"),
        ("page_types", DELETE, "page_types: required"),
        ("page_types", {}, "page_types: at least one page type"),
        ("page_types.product", {}, "page_types.product: needs fields, links or a cursor"),
        ("page_types.product.fields.sku.selector", DELETE, "fields.sku.selector: required"),
        ("page_types.product.fields.sku.requried", True, "fields.sku.requried: unknown key"),
        ("page_types.product.fields.sku.type", "float", "fields.sku.type: 'float' is not one"),
        ("page_types.product.fields.sku.selector", "div[x", "unbalanced brackets"),
        ("page_types.product.fields.sku.selector", "div >> p", "invalid CSS selector"),
        ("page_types.product.fields.sku.selector", "a,,b", "invalid CSS selector"),
        ("page_types.product.expect", {"selector": "::bogus"}, "expect.selector: invalid CSS"),
        ("page_types.product.challenge", {"text": "(unclosed"}, "challenge.text: invalid regular"),
        ("page_types.product.expect", {}, "expect: needs a selector and/or a text pattern"),
        ("page_types.product.empty_shell", {}, "empty_shell.min_text_chars: required"),
        (
            "page_types.product.links",
            {"selector": "a", "page_type": "nowhere"},
            "links.page_type: 'nowhere' is not a defined page type",
        ),
        ("page_types.product.links", {"selector": "a"}, "links.page_type: required"),
        ("page_types.product.cursor", {"attr": "href"}, "cursor.selector: required"),
        ("default_page_type", "listing", "default_page_type: 'listing' is not a defined"),
        ("entity_key", {"field": "price"}, "entity_key.field: 'price' is not a field"),
        ("entity_key", {"from": "title"}, "entity_key.from: 'title' is not supported"),
        ("entity_key", {}, "entity_key: give exactly one of"),
        ("partition.rule", "retailer", "partition.rule: 'retailer' is not host"),
        ("partition.rule", "field:sku", "partitioning by an extracted field is not supported"),
        ("provider_options", {"api_key": "x"}, "provider_options.api_key: looks like a credential"),
        ("provider_options", {"Token": "x"}, "provider_options.Token: looks like a credential"),
        (
            "provider_options",
            {"transport": "curl"},
            "provider_options.transport: 'curl' is not one of aiohttp, httpx-aiohttp, httpcore",
        ),
        ("rules", {"name": "x"}, "rules: must be an array"),
        ("rules", [{"kind": "coverage", "min": 1}], "rules[0].name: required"),
        ("rules", [{"name": "c", "kind": "magic"}], "rules.c.kind: 'magic' is not one of"),
        ("rules", [{"name": "c", "kind": "coverage"}], "rules.c.min: required for kind"),
        ("rules", [{"name": "c", "kind": "coverage", "min": 95}], "rules.c.min: a share"),
        ("rules", [{"name": "r", "kind": "range", "field": "sku"}], "rules.r: a range rule"),
        (
            "rules",
            [{"name": "r", "kind": "range", "field": "sku", "min": 5, "max": 1}],
            "rules.r: min 5 is above max 1",
        ),
        (
            "rules",
            [{"name": "p", "kind": "pattern", "field": "sku", "pattern": "["}],
            "rules.p.pattern: invalid regular expression",
        ),
        (
            "rules",
            [{"name": "p", "kind": "pattern", "field": "nope", "pattern": "x"}],
            "rules.p.field: 'nope' is not a field",
        ),
        ("rules", [{"name": "e", "kind": "enum", "field": "sku"}], "rules.e.values: required"),
        (
            "rules",
            [{"name": "e", "kind": "enum", "field": "sku", "values": []}],
            "rules.e.values: a non-empty list",
        ),
        (
            "rules",
            [{"name": "e", "kind": "enum", "field": "sku", "values": [{"a": 1}]}],
            "rules.e.values: a non-empty list",
        ),
        (
            "rules",
            [{"name": "o", "kind": "outcome_ratio", "outcome": "won", "min": 0.5}],
            "rules.o.outcome: 'won' is not one of",
        ),
        (
            "rules",
            [{"name": "c", "kind": "coverage", "min": 0.9}] * 2,
            "rules.c: rule names must be unique",
        ),
        (
            "rules",
            [{"name": "price", "kind": "range", "field": "sku", "max": float("inf")}],
            "rules.price.max: must be a finite number, got inf",
        ),
        (
            "rules",
            [{"name": "price", "kind": "range", "field": "sku", "min": float("nan")}],
            "rules.price.min: must be a finite number, got nan",
        ),
    ],
)
def test_it_names_the_bad_key(path, value, message):
    with pytest.raises(specs.SpecError) as err:
        specs.validate(mutate(path, value))
    assert message in str(err.value)


def test_the_provider_judges_its_options_at_load_time():
    raw = mutate("provider_options", {"concurency": 4})
    raw["provider"] = "direct"
    with pytest.raises(specs.SpecError, match=r"provider_options\.concurency: unknown option"):
        specs.validate(raw)
    raw["provider_options"] = {"concurrency": 4}
    assert specs.validate(raw)["provider_options"] == {"concurrency": 4}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.toml", "name = ", "invalid TOML"),
        ("bad.json", '{"name": ', "invalid JSON at line 1"),
        ("list.json", "[1, 2]", "the top level must be a table"),
        ("spec.yaml", "name: shop", "unknown spec format '.yaml'"),
        ("latin1.toml", b"name = '\xe9'", "not UTF-8"),
    ],
)
def test_it_names_unreadable_files(tmp_path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(specs.SpecError, match=re.escape(message)):
        specs.parse_file(path)


def test_it_names_a_missing_file(tmp_path):
    with pytest.raises(specs.SpecError, match="cannot read"):
        specs.parse_file(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        # Issue 27's fault test: each used to end in a RecursionError inside the parser.
        ("deep.json", '{"name": "x", "a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("deep.toml", 'name = "x"\na = ' + "[" * 5_000 + "]" * 5_000 + "\n"),
        # Parsed without trouble, but past the limit all the same.
        ("deep65.json", '{"a": ' + "[" * 64 + "]" * 64 + "}"),
        ("deep65.toml", "a = " + "[" * 64 + "]" * 64 + "\n"),
    ],
)
def test_it_refuses_a_spec_nested_too_deep_naming_the_limit(name, content):
    with pytest.raises(specs.SpecError) as err:
        specs.parse_bytes(content.encode(), name)
    assert str(err.value) == f"{name}: nested deeper than 64 levels (tables and arrays)"


def test_a_spec_nested_64_deep_is_parsed():
    raw = specs.parse_bytes(('{"a": ' + "[" * 63 + "]" * 63 + "}").encode(), "ok.json")
    assert "a" in raw


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_it_reads_a_spec_that_starts_with_a_byte_order_mark(suffix):
    text = 'name = "shop"\n' if suffix == ".toml" else '{"name": "shop"}'
    raw = specs.parse_bytes(b"\xef\xbb\xbf" + text.encode(), f"bom{suffix}")
    assert raw == {"name": "shop"}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        # PostgreSQL's jsonb cannot store these: each was an HTTP 500 at the INSERT (issue 27).
        ("description", "a\x00b", "description: contains a NUL character"),
        ("page_types.product.fields.sku.attr", "x\x00", "fields.sku.attr: contains a NUL"),
        (
            "rules",
            [{"name": "e", "kind": "enum", "field": "sku", "values": ["a", float("inf")]}],
            "rules.e.values[1]: must be a finite number, got inf",
        ),
        (
            "rules",
            [{"name": "c", "kind": "coverage", "min": 0.5, "description": "\x00"}],
            "rules.c.description: contains a NUL character",
        ),
    ],
)
def test_it_refuses_what_the_database_cannot_store(path, value, message):
    with pytest.raises(specs.SpecError) as err:
        specs.validate(mutate(path, value))
    assert message in str(err.value)


def test_it_refuses_a_nul_in_a_key_the_provider_passes_through():
    raw = mutate("provider_options", {"n\x00": 1})
    raw["provider"] = "noop"
    with pytest.raises(specs.SpecError, match=re.escape("provider_options.n\\x00: a key contains")):
        specs.validate(raw)


def test_every_independent_problem_is_reported_at_once():
    raw = copy.deepcopy(MINIMAL)
    raw["max_attempts"] = 0
    raw["provider"] = "carrier-pigeon"
    raw["page_types"]["listing"] = {"fields": {"title": {"attr": "href"}}}  # no selector
    raw["rules"] = [
        {"name": "has_title", "kind": "required", "field": "title", "min": 0.9},  # fine
        {"name": "bad", "kind": "nope"},
    ]
    with pytest.raises(specs.SpecError) as info:
        specs.validate(raw)
    assert info.value.problems == [
        "provider: 'carrier-pigeon' is not one of " + ", ".join(specs.PROVIDERS),
        "max_attempts: must be >= 1, got 0",
        "page_types.listing.fields.title.selector: required",
        f"rules.bad.kind: 'nope' is not one of {', '.join([*specs.RULE_KINDS, *spec_rules.KINDS])}",
    ]
    # The broken page type's field is still a name the rule may use: one problem, not two.
    assert str(info.value) == "\n".join(info.value.problems)


def test_a_file_names_itself_before_each_problem():
    raw = copy.deepcopy(MINIMAL)
    raw.update(max_attempts=0, auto_accept="yes")
    data = json.dumps(raw).encode()
    with pytest.raises(specs.SpecError) as info:
        specs.check_bytes(data, "shop.json")
    assert info.value.problems == [
        "shop.json: auto_accept: must be true or false",
        "shop.json: max_attempts: must be >= 1, got 0",
    ]
