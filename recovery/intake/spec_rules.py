"""The window-over-window rule kinds of a dataset spec, checked (docs/spec-format.md, "Rules
that compare windows").

    { name, kind = "entity_count_change", max_drop?, max_rise? }   (at least one of the two)
    { name, kind = "disappeared_entities", max_share }
    { name, kind = "value_shift", field, max_change, quantile? }   (quantile: default 0.9)

Each compares a candidate with its dataset's previous accepted window; they are evaluated by
recovery.quality.window_gates. Their keys are their own, so recovery.intake.specs hands such a
rule here whole (`check`) before its own rule checks.
"""

from __future__ import annotations

import re
from typing import Any

from recovery.intake.spec_checks import SpecError, as_number, as_text, no_unknown

DEFAULT_QUANTILE = 0.9

# Rule kind -> keys it must have; OPTIONAL the keys it may have besides name and description.
KINDS: dict[str, tuple[str, ...]] = {
    "entity_count_change": (),
    "disappeared_entities": ("max_share",),
    "value_shift": ("field", "max_change"),
}
OPTIONAL: dict[str, frozenset[str]] = {
    "entity_count_change": frozenset({"max_drop", "max_rise"}),
    "disappeared_entities": frozenset(),
    "value_shift": frozenset({"quantile"}),
}


def check(table: dict[str, Any], where: str, fields: set[str], name_re: re.Pattern) -> dict:
    """The normalised rule; SpecError naming the key (`rules.gone.max_share: ...`). `where` is
    the rule's place in the list (`rules[3]`) until its name is known; `fields` are the spec's
    field names; `name_re` the pattern every rule name matches (recovery.intake.specs)."""
    kind = table["kind"]
    no_unknown(
        table, frozenset({"name", "kind", "description", *KINDS[kind], *OPTIONAL[kind]}), where
    )
    if "name" not in table:
        raise SpecError(f"{where}.name: required")
    name = as_text(table["name"], f"{where}.name")
    if not name_re.match(name):
        raise SpecError(f"{where}.name: {name!r} must match [A-Za-z_][A-Za-z0-9_-]*")
    where = f"rules.{name}"
    for key in KINDS[kind]:
        if key not in table:
            raise SpecError(f"{where}.{key}: required for kind {kind!r}")
    out: dict[str, Any] = {"name": name, "kind": kind}
    if "description" in table:
        out["description"] = as_text(table["description"], f"{where}.description")
    if kind == "entity_count_change":
        if "max_drop" not in table and "max_rise" not in table:
            raise SpecError(f"{where}: an entity_count_change rule needs max_drop and/or max_rise")
        if "max_drop" in table:
            out["max_drop"] = _share(table["max_drop"], f"{where}.max_drop")
        if "max_rise" in table:
            out["max_rise"] = _at_least_zero(table["max_rise"], f"{where}.max_rise")
    elif kind == "disappeared_entities":
        out["max_share"] = _share(table["max_share"], f"{where}.max_share")
    else:
        field = as_text(table["field"], f"{where}.field")
        if field not in fields:
            raise SpecError(f"{where}.field: {field!r} is not a field of any page type")
        out["field"] = field
        out["max_change"] = _at_least_zero(table["max_change"], f"{where}.max_change")
        quantile = as_number(table.get("quantile", DEFAULT_QUANTILE), f"{where}.quantile")
        if not 0 < quantile < 1:
            raise SpecError(f"{where}.quantile: must be between 0 and 1 (exclusive), e.g. 0.9")
        out["quantile"] = quantile
    return out


def _share(value: Any, where: str) -> float:
    number = as_number(value, where)
    if not 0 <= number <= 1:
        raise SpecError(f"{where}: a share must be between 0 and 1")
    return number


def _at_least_zero(value: Any, where: str) -> float:
    number = as_number(value, where)
    if number < 0:
        raise SpecError(f"{where}: must be >= 0 (a relative change: 0.3 is 30%)")
    return number
