"""One observation's verdict under its run's rules, judged once, when the row is committed.

Issue 15: evaluating a run used to judge and rewrite every observation, which at 1,000,000
rows cost ~50x one SQL aggregate over the same rules (the rewrite of every row was most of
it). Now the commit that writes a row also writes its verdict (recovery.leases): a bit mask
of what the row failed, the digest of the rules that judged it, and its state, `valid` or
`invalid`. An evaluation (recovery.quality.validation) then sums the stored bits per partition, and
judges again only the rows a different set of rules judged (a `loaddataset` that changed
them, a worker whose cached spec was a moment old) or nobody did.

The bits of a verdict (Rules.layout): bit i is "value rule i fails" (the spec's `range`,
`pattern` and `enum` rules in order); then one bit per field a `partition_invalid_share` rule
watches (sorted by name): the field is empty or fails a value rule on it; the last bit is
"incomplete": a field its page type requires is empty. A row is valid when no value rule
fails and it is complete. Rules needing more than MAX_BITS bits are not judged at commit
(the row stays `pending` and the evaluation judges it).

This module holds the one Python definition of "invalid" (check_value, empty), which
recovery.quality.validation_sql reproduces in SQL only where it provably agrees.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

VALUE_RULE_KINDS = ("range", "pattern", "enum")
MAX_BITS = 62  # the verdict is a signed 64-bit column; the sums shift it right
VALID = "valid"
INVALID = "invalid"
PENDING = "pending"


def number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def check_value(rule: dict[str, Any], value: Any, compiled: Any) -> bool:
    """True when `value` satisfies a value rule. A missing value is the `required` rule's
    business, so it passes here (but counts as invalid for a partition rule on its field)."""
    if empty(value):
        return True
    if rule["kind"] == "range":
        parsed = number(value)
        if parsed is None:
            return False
        if "min" in rule and parsed < rule["min"]:
            return False
        return not ("max" in rule and parsed > rule["max"])
    if rule["kind"] == "pattern":
        return bool(compiled and compiled.search(str(value)))
    if rule["kind"] == "enum":
        # Compared as text: extraction yields strings, a spec may list numbers.
        return str(value) in compiled
    return True


def required_fields(spec: dict[str, Any]) -> dict[str, list[str]]:
    """{page type: [required field names]}."""
    return {
        name: [f for f, fs in pt.get("fields", {}).items() if fs.get("required")]
        for name, pt in spec.get("page_types", {}).items()
    }


@dataclass(frozen=True)
class Rules:
    """The row-level part of a spec's rules, ready to judge payloads."""

    value_rules: tuple[dict[str, Any], ...]
    required: dict[str, tuple[str, ...]]
    watched: tuple[str, ...]
    digest: str
    compiled: dict[str, Any]  # rule name -> compiled pattern or allowed values

    @classmethod
    def of(cls, spec: dict[str, Any] | None) -> Rules:
        spec = spec or {}
        rules = list(spec.get("rules", []))
        value_rules = tuple(r for r in rules if r["kind"] in VALUE_RULE_KINDS)
        # Sorted: PostgreSQL's jsonb does not keep a spec's key order, and the order of required
        # fields decides nothing.
        required = {pt: tuple(sorted(fs)) for pt, fs in required_fields(spec).items() if fs}
        watched = tuple(
            sorted({r["field"] for r in rules if r["kind"] == "partition_invalid_share"})
        )
        # What decides a verdict, in one spelling: equal digests judge every payload alike.
        basis = {"layout": 1, "value_rules": value_rules, "required": required, "watched": watched}
        digest = hashlib.sha256(
            json.dumps(basis, sort_keys=True, separators=(",", ":"), default=str).encode()
        ).hexdigest()[:16]
        compiled: dict[str, Any] = {}
        for r in value_rules:
            if r.get("pattern"):
                compiled[r["name"]] = re.compile(r["pattern"])
            if "values" in r:
                compiled[r["name"]] = frozenset(str(v) for v in r["values"])
        return cls(value_rules, required, watched, digest, compiled)

    # --- the layout of the bits -------------------------------------------------------------

    @property
    def bits(self) -> int:
        return len(self.value_rules) + len(self.watched) + 1

    @property
    def judged_at_commit(self) -> bool:
        return self.bits <= MAX_BITS

    def watched_bit(self, k: int) -> int:
        return len(self.value_rules) + k

    @property
    def incomplete_bit(self) -> int:
        return len(self.value_rules) + len(self.watched)

    @property
    def invalid_mask(self) -> int:
        """The bits that make a row invalid: a failed value rule, or incomplete."""
        return ((1 << len(self.value_rules)) - 1) | (1 << self.incomplete_bit)

    # --- judging ----------------------------------------------------------------------------

    def verdict(self, payload: Any, page_type: str | None) -> int:
        """The verdict bits of one payload (see the module's docstring)."""
        if not (self.value_rules or self.watched or self.required):
            return 0  # nothing to judge (a spec without rules): every payload passes
        payload = payload if isinstance(payload, dict) else {}
        bits = 0
        bad_fields: set[str] = set()
        for i, rule in enumerate(self.value_rules):
            if not check_value(rule, payload.get(rule["field"]), self.compiled.get(rule["name"])):
                bits |= 1 << i
                bad_fields.add(rule["field"])
        for k, name in enumerate(self.watched):
            if name in bad_fields or empty(payload.get(name)):
                bits |= 1 << self.watched_bit(k)
        # A row whose page type is unknown (no source task) has no required fields.
        for name in self.required.get(page_type, ()) if page_type is not None else ():
            if empty(payload.get(name)):
                bits |= 1 << self.incomplete_bit
                break
        return bits

    def state(self, bits: int) -> str:
        return INVALID if bits & self.invalid_mask else VALID


# --- the rules a commit judges with, per dataset, cached for a moment per process -------------

_TTL = 2.0
_cache: dict[tuple[int, str], tuple[float, Rules]] = {}


def remember(dataset_id: int, name: str, spec: dict[str, Any] | None) -> Rules:
    """The Rules of a spec just read (the worker reads specs anyway); cached for _TTL, keyed
    by id and name (ids can be reused, as in tests)."""
    rules = Rules.of(spec)
    _cache[(dataset_id, name)] = (time.monotonic(), rules)
    return rules


def rules_for(datasets: set[tuple[int, str]]) -> dict[tuple[int, str], Rules]:
    """{(dataset id, name): Rules}, read from the database where the cache has none fresh. A
    stale read is harmless: the row records its rules' digest, and an evaluation judges again
    a row whose digest is not its run's current one."""
    now = time.monotonic()
    missing = [key for key in datasets if key not in _cache or now - _cache[key][0] > _TTL]
    if missing:
        from recovery.models import Dataset

        for pk, name, spec in Dataset.objects.filter(
            pk__in=[pk for pk, _name in missing]
        ).values_list("pk", "name", "spec"):
            remember(pk, name, spec)
    return {key: _cache[key][1] for key in datasets if key in _cache}
