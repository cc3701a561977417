"""The spec's `sitemap` option (recovery.intake.spec_sitemap): rules, page types, robots.txt."""

from __future__ import annotations

import copy

import pytest

from recovery.intake import specs

BASE = {
    "name": "shop",
    "page_types": {
        "product": {"fields": {"sku": {"selector": "[data-sku]"}}},
        "category": {"links": {"selector": "a", "page_type": "product"}},
    },
}
URL = "http://shop.example/sitemap.xml"


def validate(sitemap):
    raw = copy.deepcopy(BASE)
    raw["sitemap"] = sitemap
    return specs.validate(raw)


def test_rules_map_url_patterns_to_page_types_and_the_page_type_is_then_optional():
    rules = [
        {"pattern": "/product/", "page_type": "product"},
        {"pattern": "/c/", "page_type": "category"},
    ]
    spec = validate({"url": URL, "rules": rules})
    assert spec["sitemap"] == {"url": URL, "page_type": None, "rules": rules}
    with_default = validate({"url": URL, "page_type": "category", "rules": rules[:1]})
    assert with_default["sitemap"]["page_type"] == "category"
    # A spec without rules is stored as before (its hash unchanged).
    assert validate({"url": URL, "page_type": "product"})["sitemap"] == {
        "url": URL,
        "page_type": "product",
    }


def test_a_robots_txt_is_a_sitemap_url():
    spec = validate({"url": "HTTP://Shop.Example/robots.txt", "page_type": "product"})
    assert spec["sitemap"]["url"] == "http://shop.example/robots.txt"


@pytest.mark.parametrize(
    ("sitemap", "message"),
    [
        ({"url": URL}, "sitemap.page_type: required (or rules that give the page types)"),
        ({"url": URL, "rules": []}, "sitemap.page_type: required"),
        ({"url": URL, "rules": "/product/"}, "sitemap.rules: must be a list"),
        ({"url": URL, "rules": ["/product/"]}, "sitemap.rules[0]: must be a table"),
        (
            {"url": URL, "rules": [{"pattern": "/p/", "page_type": "product", "x": 1}]},
            "sitemap.rules[0].x: unknown key",
        ),
        ({"url": URL, "rules": [{"page_type": "product"}]}, "sitemap.rules[0].pattern: required"),
        ({"url": URL, "rules": [{"pattern": "/p/"}]}, "sitemap.rules[0].page_type: required"),
        (
            {
                "url": URL,
                "rules": [
                    {"pattern": "/p/", "page_type": "product"},
                    {"pattern": "/c/(", "page_type": "category"},
                ],
            },
            "sitemap.rules[1].pattern: invalid regular expression",
        ),
        (
            {"url": URL, "rules": [{"pattern": "/p/", "page_type": "item"}]},
            "sitemap.rules[0].page_type: 'item' is not a defined page type",
        ),
        (
            {"url": URL, "rules": [{"pattern": "/p/", "page_type": "product"}] * 101},
            "sitemap.rules: at most 100 rules",
        ),
    ],
)
def test_a_bad_rule_is_refused_naming_its_key(sitemap, message):
    with pytest.raises(specs.SpecError) as info:
        validate(sitemap)
    assert message in str(info.value)
