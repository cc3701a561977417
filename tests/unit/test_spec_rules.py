"""The rules that compare windows load from a spec with their defaults, and every mistake in
one names its key (recovery/intake/spec_rules.py, through recovery.intake.specs)."""

from __future__ import annotations

import copy

import pytest

from recovery.intake import specs

BASE = {
    "name": "shop",
    "page_types": {
        "product": {
            "fields": {
                "sku": {"selector": "[data-sku]", "attr": "data-sku"},
                "price": {"selector": ".price", "type": "decimal"},
            }
        }
    },
}


def with_rules(*rules: dict) -> dict:
    spec = copy.deepcopy(BASE)
    spec["rules"] = list(rules)
    return spec


def test_it_loads_each_kind_and_fills_in_the_quantile():
    spec = specs.validate(
        with_rules(
            {"name": "size", "kind": "entity_count_change", "max_drop": 0.2},
            {"name": "grow", "kind": "entity_count_change", "max_rise": 2},
            {"name": "gone", "kind": "disappeared_entities", "max_share": 0.1},
            {"name": "shift", "kind": "value_shift", "field": "price", "max_change": 0.3},
            {"name": "range", "kind": "range", "field": "price", "min": 0},
        )
    )
    assert spec["rules"] == [
        {"name": "size", "kind": "entity_count_change", "max_drop": 0.2},
        {"name": "grow", "kind": "entity_count_change", "max_rise": 2},
        {"name": "gone", "kind": "disappeared_entities", "max_share": 0.1},
        {
            "name": "shift",
            "kind": "value_shift",
            "field": "price",
            "max_change": 0.3,
            "quantile": 0.9,
        },
        {"name": "range", "kind": "range", "field": "price", "min": 0},
    ]


@pytest.mark.parametrize(
    "rule, message",
    [
        (
            {"name": "size", "kind": "entity_count_change"},
            "rules.size: an entity_count_change rule needs max_drop and/or max_rise",
        ),
        (
            {"name": "size", "kind": "entity_count_change", "max_drop": 1.5},
            "rules.size.max_drop: a share must be between 0 and 1",
        ),
        (
            {"name": "size", "kind": "entity_count_change", "max_rise": -1},
            "rules.size.max_rise: must be >= 0",
        ),
        (
            {"name": "size", "kind": "entity_count_change", "max": 0.2},
            "rules[0].max: unknown key",
        ),
        (
            {"name": "gone", "kind": "disappeared_entities"},
            "rules.gone.max_share: required for kind 'disappeared_entities'",
        ),
        (
            {"name": "gone", "kind": "disappeared_entities", "max_share": True},
            "rules.gone.max_share: must be a number",
        ),
        (
            {"name": "shift", "kind": "value_shift", "field": "cost", "max_change": 0.3},
            "rules.shift.field: 'cost' is not a field of any page type",
        ),
        (
            {
                "name": "shift",
                "kind": "value_shift",
                "field": "price",
                "max_change": 0.3,
                "quantile": 1,
            },
            "rules.shift.quantile: must be between 0 and 1 (exclusive)",
        ),
        (
            {"name": "shift", "kind": "value_shift", "field": "price"},
            "rules.shift.max_change: required for kind 'value_shift'",
        ),
        (
            {"kind": "value_shift", "field": "price", "max_change": 0.3},
            "rules[0].name: required",
        ),
        (
            {"name": "bad name", "kind": "disappeared_entities", "max_share": 0.1},
            "rules[0].name: 'bad name' must match",
        ),
        (
            {"name": "typo", "kind": "entity_count_changes"},
            "rules.typo.kind: 'entity_count_changes' is not one of coverage, range, pattern, "
            "enum, required, outcome_ratio, partition_invalid_share, entity_count_change, "
            "disappeared_entities, value_shift",
        ),
    ],
)
def test_it_names_the_bad_key(rule, message):
    with pytest.raises(specs.SpecError) as refused:
        specs.validate(with_rules(rule))
    assert message in str(refused.value)


def test_rule_names_stay_unique_across_kinds():
    with pytest.raises(specs.SpecError, match=r"rules\.size: rule names must be unique"):
        specs.validate(
            with_rules(
                {"name": "size", "kind": "coverage", "min": 0.9},
                {"name": "size", "kind": "entity_count_change", "max_drop": 0.2},
            )
        )
