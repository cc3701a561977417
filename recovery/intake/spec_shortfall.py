"""The `inventory_shortfall` rule kind of a dataset spec, checked (docs/spec-format.md,
"Inventory shortfall"):

    { name, kind = "inventory_shortfall", max_share? }   (max_share: default 0.0)

The share of items the run's listings state but their walks did not find, at most
`max_share` (0.0: any shortfall fails the run). Evaluated by recovery.quality.shortfall. Its
keys are its own, so recovery.intake.specs hands such a rule here whole (`check`).
"""

from __future__ import annotations

import re
from typing import Any

from recovery.intake.spec_checks import SpecError, as_number, as_text, no_unknown

KINDS = ("inventory_shortfall",)
KEYS = frozenset({"name", "kind", "description", "max_share"})


def check(table: dict[str, Any], where: str, name_re: re.Pattern) -> dict[str, Any]:
    """The normalised rule; SpecError naming the key (`rules.short.max_share: ...`)."""
    no_unknown(table, KEYS, where)
    if "name" not in table:
        raise SpecError(f"{where}.name: required")
    name = as_text(table["name"], f"{where}.name")
    if not name_re.match(name):
        raise SpecError(f"{where}.name: {name!r} must match [A-Za-z_][A-Za-z0-9_-]*")
    where = f"rules.{name}"
    out: dict[str, Any] = {"name": name, "kind": table["kind"]}
    if "description" in table:
        out["description"] = as_text(table["description"], f"{where}.description")
    share = as_number(table.get("max_share", 0.0), f"{where}.max_share")
    if not 0 <= share <= 1:
        raise SpecError(f"{where}.max_share: a share must be between 0 and 1")
    out["max_share"] = share
    return out
