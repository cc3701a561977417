"""Dataset specs: parse a TOML or JSON file, validate it, store it as a Dataset.

The format is docs/spec-format.md. Validation is strict about names (an unknown key is an
error, so a typo such as `requried` cannot silently turn a required field optional) and every
error names the offending key by its dotted path. The stored spec is the normalised dict:
defaults filled in, so readers never guess, and `default_page_type` recorded explicitly because
PostgreSQL's jsonb does not keep key order (the "first" page type would be lost on reload).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery.intake import spec_rules, spec_shortfall, spec_sitemap
from recovery.intake.spec_checks import (
    Problems,
    SpecError,
    as_bool,
    as_int,
    as_number,
    as_regex,
    as_selector,
    as_table,
    as_text,
    as_version,
    no_unknown,
)

PROVIDERS = ("direct", "browser", "messora", "tornado", "webscraper", "noop")
FIELD_TYPES = ("text", "decimal", "int", "bool", "timestamp")
MARKERS = ("expect", "consent", "login", "challenge", "empty_shell")
TASK_OUTCOMES = ("committed", "quarantined", "gone", "dead")

# Rule kind -> keys it must have (recovery/quality/validation.py evaluates them).
RULE_KINDS: dict[str, tuple[str, ...]] = {
    "coverage": ("min",),
    "range": ("field",),
    "pattern": ("field", "pattern"),
    "enum": ("field", "values"),
    "required": ("min",),
    "outcome_ratio": ("outcome", "min"),
    "partition_invalid_share": ("field", "max"),
}
RULE_KEYS = frozenset(
    {"name", "kind", "field", "min", "max", "pattern", "values", "outcome", "description"}
)

TOP_KEYS = frozenset(
    {
        "name",
        "description",
        "provider",
        "scraper_version",
        "schema_version",
        "auto_accept",
        "lease_seconds",
        "max_attempts",
        "max_elapsed_seconds",
        "entity_key",
        "partition",
        "provider_options",
        "page_types",
        "default_page_type",
        "rules",
        "robots",
        "sitemap",
    }
)
PAGE_TYPE_KEYS = frozenset({*MARKERS, "fields", "links", "cursor"})
FIELD_KEYS = frozenset({"selector", "attr", "type", "required"})
LINK_KEYS = frozenset({"selector", "attr", "page_type", "max_depth", "allow"})
CURSOR_KEYS = frozenset({"selector", "attr", "total"})
TOTAL_KEYS = frozenset({"selector", "attr"})

# Credentials come from the environment only (guarantee 11): a spec is stored in the database
# and shown in the dashboard, so an option whose name looks like a secret is refused.
_SECRET_NAME = re.compile(r"(key|token|secret|password|passwd|credential|auth|cookie)", re.I)
_SLUG = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
# Tables and arrays nested deeper than this are refused: a real spec nests five tables deep
# (page_types.product.fields.sku.selector), and the parsers recurse once a level, so a file
# nested thousands deep would otherwise end in a RecursionError (an HTTP 500, a traceback).
MAX_DEPTH = 64


def parse_file(path: str | Path) -> dict[str, Any]:
    """Read a .toml or .json spec file into a raw dict (not yet validated)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return parse_bytes(data, path)


def parse_bytes(data: bytes, path: str | Path) -> dict[str, Any]:
    """A spec's bytes into a raw dict; `path` names it in messages and gives its format."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise SpecError(f"{path}: unknown spec format {suffix or '(none)'!r} (use .toml or .json)")
    try:
        # utf-8-sig: Windows editors (Notepad, older Excel exports) start a file with a byte
        # order mark, which neither parser accepts; it says nothing, so it is dropped.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 (byte {exc.start})") from None
    too_deep = SpecError(f"{path}: nested deeper than {MAX_DEPTH} levels (tables and arrays)")
    try:
        raw = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: invalid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise too_deep from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the top level must be a table/object")
    if _deeper_than(raw, MAX_DEPTH):
        raise too_deep
    return raw


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether tables and arrays nest more than `limit` levels (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > limit:
            return True
        stack.extend(
            (child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
        )
    return False


def _marker(value: Any, where: str, name: str) -> dict[str, Any]:
    table = as_table(value, where)
    if name == "empty_shell":
        no_unknown(table, frozenset({"min_text_chars"}), where)
        if "min_text_chars" not in table:
            raise SpecError(f"{where}.min_text_chars: required")
        return {
            "min_text_chars": as_int(table["min_text_chars"], f"{where}.min_text_chars", minimum=0)
        }
    no_unknown(table, frozenset({"selector", "text"}), where)
    if not table:
        raise SpecError(f"{where}: needs a selector and/or a text pattern")
    out: dict[str, Any] = {}
    if "selector" in table:
        out["selector"] = as_selector(table["selector"], f"{where}.selector")
    if "text" in table:
        out["text"] = as_regex(table["text"], f"{where}.text")
    return out


def _field(value: Any, where: str) -> dict[str, Any]:
    table = as_table(value, where)
    no_unknown(table, FIELD_KEYS, where)
    if "selector" not in table:
        raise SpecError(f"{where}.selector: required")
    out: dict[str, Any] = {
        "selector": as_selector(table["selector"], f"{where}.selector"),
        "type": table.get("type", "text"),
        "required": as_bool(table.get("required", False), f"{where}.required"),
    }
    if out["type"] not in FIELD_TYPES:
        raise SpecError(f"{where}.type: {out['type']!r} is not one of {', '.join(FIELD_TYPES)}")
    if "attr" in table:
        out["attr"] = as_text(table["attr"], f"{where}.attr")
    return out


def _links(value: Any, where: str) -> dict[str, Any]:
    table = as_table(value, where)
    no_unknown(table, LINK_KEYS, where)
    for key in ("selector", "page_type"):
        if key not in table:
            raise SpecError(f"{where}.{key}: required")
    out: dict[str, Any] = {
        "selector": as_selector(table["selector"], f"{where}.selector"),
        "attr": as_text(table.get("attr", "href"), f"{where}.attr"),
        "page_type": as_text(table["page_type"], f"{where}.page_type"),
        "max_depth": as_int(table.get("max_depth", 1), f"{where}.max_depth", minimum=0),
        "allow": [],
    }
    allow = table.get("allow", [])
    if not isinstance(allow, list):
        raise SpecError(f"{where}.allow: must be a list of strings")
    out["allow"] = [as_text(item, f"{where}.allow[{i}]") for i, item in enumerate(allow)]
    return out


def _page_type(value: Any, where: str) -> dict[str, Any]:
    table = as_table(value, where)
    no_unknown(table, PAGE_TYPE_KEYS, where)
    out: dict[str, Any] = {}
    for name in MARKERS:
        if name in table:
            out[name] = _marker(table[name], f"{where}.{name}", name)
    fields = as_table(table.get("fields", {}), f"{where}.fields")
    out["fields"] = {}
    for field_name, spec in fields.items():
        if not _NAME.match(field_name):
            raise SpecError(f"{where}.fields.{field_name}: field names are [A-Za-z0-9_-]")
        out["fields"][field_name] = _field(spec, f"{where}.fields.{field_name}")
    if "links" in table:
        out["links"] = _links(table["links"], f"{where}.links")
    if "cursor" in table:
        cursor = as_table(table["cursor"], f"{where}.cursor")
        no_unknown(cursor, CURSOR_KEYS, f"{where}.cursor")
        if "selector" not in cursor:
            raise SpecError(f"{where}.cursor.selector: required")
        out["cursor"] = {
            "selector": as_selector(cursor["selector"], f"{where}.cursor.selector"),
            "attr": as_text(cursor.get("attr", "href"), f"{where}.cursor.attr"),
        }
        if "total" in cursor:
            # Where the page shows its item count: offset walks re-read the head until the
            # count is stable (recovery.fetch.drift), so items added during the walk are collected.
            total = as_table(cursor["total"], f"{where}.cursor.total")
            no_unknown(total, TOTAL_KEYS, f"{where}.cursor.total")
            if "selector" not in total:
                raise SpecError(f"{where}.cursor.total.selector: required")
            out["cursor"]["total"] = {
                "selector": as_selector(total["selector"], f"{where}.cursor.total.selector")
            }
            if "attr" in total:
                out["cursor"]["total"]["attr"] = as_text(
                    total["attr"], f"{where}.cursor.total.attr"
                )
    if not (out["fields"] or "links" in out or "cursor" in out):
        raise SpecError(f"{where}: needs fields, links or a cursor (it would extract nothing)")
    return out


def _rule(value: Any, where: str, fields: set[str]) -> dict[str, Any]:
    table = as_table(value, where)
    if isinstance(table.get("kind"), str) and table["kind"] in spec_rules.KINDS:
        # Rules that compare windows have keys of their own (recovery/intake/spec_rules.py).
        return spec_rules.check(table, where, fields, _NAME)
    if isinstance(table.get("kind"), str) and table["kind"] in spec_shortfall.KINDS:
        # A listing's stated total against the items found (recovery/intake/spec_shortfall.py).
        return spec_shortfall.check(table, where, _NAME)
    no_unknown(table, RULE_KEYS, where)
    for key in ("name", "kind"):
        if key not in table:
            raise SpecError(f"{where}.{key}: required")
    name = as_text(table["name"], f"{where}.name")
    if not _NAME.match(name):
        raise SpecError(f"{where}.name: {name!r} must match [A-Za-z_][A-Za-z0-9_-]*")
    where = f"rules.{name}"
    kind = table["kind"]
    if kind not in RULE_KINDS:
        kinds = ", ".join([*RULE_KINDS, *spec_rules.KINDS])
        raise SpecError(f"{where}.kind: {kind!r} is not one of {kinds}")
    for key in RULE_KINDS[kind]:
        if key not in table:
            raise SpecError(f"{where}.{key}: required for kind {kind!r}")
    out: dict[str, Any] = {"name": name, "kind": kind}
    if "description" in table:
        out["description"] = as_text(table["description"], f"{where}.description")
    if "field" in table:
        field = as_text(table["field"], f"{where}.field")
        if field not in fields:
            raise SpecError(f"{where}.field: {field!r} is not a field of any page type")
        out["field"] = field
    for key in ("min", "max"):
        if key in table:
            out[key] = as_number(table[key], f"{where}.{key}")
    if kind == "range" and "min" not in out and "max" not in out:
        raise SpecError(f"{where}: a range rule needs min and/or max")
    if kind in ("coverage", "required", "outcome_ratio", "partition_invalid_share"):
        for key in ("min", "max"):
            if key in out and not 0 <= out[key] <= 1:
                raise SpecError(f"{where}.{key}: a share must be between 0 and 1")
    if "min" in out and "max" in out and out["min"] > out["max"]:
        raise SpecError(f"{where}: min {out['min']} is above max {out['max']}")
    if "pattern" in table:
        out["pattern"] = as_regex(table["pattern"], f"{where}.pattern")
    if "values" in table:
        values = table["values"]
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str | int | float) for v in values)
        ):
            raise SpecError(f"{where}.values: a non-empty list of strings or numbers")
        out["values"] = values
    if "outcome" in table:
        if table["outcome"] not in TASK_OUTCOMES:
            raise SpecError(
                f"{where}.outcome: {table['outcome']!r} is not one of {', '.join(TASK_OUTCOMES)}"
            )
        out["outcome"] = table["outcome"]
    return out


def _robots(value: Any) -> dict[str, Any]:
    """`robots = { obey = false, reason = "..." }`: robots.txt is obeyed unless a reason is given
    for not doing so (recovery.fetch.robots; saving the spec writes the reason to the audit log).
    Not obeying the rules keeps the site's Crawl-delay, unless `crawl_delay = false` says so too
    (under the same reason)."""
    table = as_table(value, "robots")
    no_unknown(table, frozenset({"obey", "reason", "crawl_delay"}), "robots")
    obey = as_bool(table.get("obey", True), "robots.obey")
    crawl_delay = as_bool(table.get("crawl_delay", True), "robots.crawl_delay")
    if obey:
        if not crawl_delay:
            raise SpecError(
                "robots.crawl_delay: false only together with obey = false (and its reason): "
                "rules that are obeyed come with their Crawl-delay"
            )
        if "reason" in table:
            as_text(table["reason"], "robots.reason", allow_empty=True)
        return {"obey": True}
    reason = as_text(table.get("reason", ""), "robots.reason", allow_empty=True).strip()
    if len(reason) < 10:
        raise SpecError(
            "robots.reason: obey = false needs a stated reason (at least 10 characters), "
            "e.g. the site owner's written permission"
        )
    out: dict[str, Any] = {"obey": False, "reason": reason}
    if not crawl_delay:
        out["crawl_delay"] = False  # only when given: older opt-outs keep their hash
    return out


def _check_provider_options(provider: str, options: dict[str, Any]) -> None:
    """Let the provider's own `parse_options` judge its options now, at load time, rather
    than at the first claim when a whole run is already waiting on a typo."""
    try:
        module = importlib.import_module(f"recovery.providers.{provider}")
    except ImportError:
        return  # a provider without a module of its own has no options to check
    parse_options = getattr(module, "parse_options", None)
    if parse_options is None:
        return
    try:
        parse_options(dict(options))
    except (TypeError, ValueError) as exc:
        message = str(exc)
        if not message.startswith("provider_options"):
            message = f"provider_options: {message}"
        raise SpecError(message) from None


def validate(raw: dict[str, Any]) -> dict[str, Any]:
    """Check a raw spec and return the normalised spec (defaults filled in).

    Each part is checked on its own and every problem is reported at once (SpecError.problems):
    the top-level settings one by one, each page type, each rule. A check that reads another
    part (a rule's field, the default page type) reads the names as written, so one broken
    page type does not also make every rule that names its fields look wrong.
    """
    as_table(raw, "spec")
    problems = Problems()
    problems.check(no_unknown, raw, TOP_KEYS, "")
    name = problems.check(_spec_name, raw)
    provider = problems.check(_provider, raw)
    spec: dict[str, Any] = {
        "name": name,
        "provider": provider,
        "scraper_version": problems.check(
            as_version, raw.get("scraper_version", "1"), "scraper_version"
        ),
        "schema_version": problems.check(
            as_version, raw.get("schema_version", "1"), "schema_version"
        ),
        "auto_accept": problems.check(as_bool, raw.get("auto_accept", False), "auto_accept"),
        "lease_seconds": problems.check(_lease_seconds, raw.get("lease_seconds")),
        "max_attempts": problems.check(
            as_int, raw.get("max_attempts", 5), "max_attempts", minimum=1
        ),
        "max_elapsed_seconds": problems.check(
            as_int, raw.get("max_elapsed_seconds", 21600), "max_elapsed_seconds", minimum=1
        ),
    }
    if "description" in raw:
        spec["description"] = problems.check(
            as_text, raw["description"], "description", allow_empty=True
        )

    page_types, complete = _page_types(raw, problems)
    spec["page_types"] = page_types
    spec["default_page_type"] = problems.check(_default_page_type, raw)
    all_fields = {f for pt in page_types.values() for f in pt["fields"]} | _written_fields(raw)
    spec["entity_key"] = problems.check(_entity_key, raw, all_fields)
    spec["partition"] = problems.check(_partition, raw)
    if provider is not None:
        spec["provider_options"] = problems.check(_provider_options, raw, provider)
    if "robots" in raw:
        # Only written when given, so the specs saved before robots.txt support keep their hash.
        spec["robots"] = problems.check(_robots, raw["robots"])
    if "sitemap" in raw and complete and provider is not None:
        spec["sitemap"] = problems.check(spec_sitemap.check, raw["sitemap"], page_types, provider)
    spec["rules"] = _rules(raw, all_fields, problems)
    problems.raise_any()
    _refuse_unstorable(spec)
    return spec


def _spec_name(raw: dict[str, Any]) -> str:
    if "name" not in raw:
        raise SpecError("name: required")
    name = as_text(raw["name"], "name")
    if not _SLUG.match(name):
        raise SpecError(f"name: {name!r} must be a slug ([A-Za-z0-9_-], at most 100 characters)")
    return name


def _provider(raw: dict[str, Any]) -> str:
    provider = raw.get("provider", "direct")
    if provider not in PROVIDERS:
        raise SpecError(f"provider: {provider!r} is not one of {', '.join(PROVIDERS)}")
    return provider


def _lease_seconds(value: Any) -> int | str | None:
    if value == "auto":
        return "auto"  # the lease its recent attempts imply (recovery.leases.sizing)
    if value is None:
        return None
    return as_int(value, "lease_seconds", minimum=1)


def _page_types(raw: dict[str, Any], problems: Problems) -> tuple[dict[str, Any], bool]:
    """The page types that passed, and whether all of them did."""
    if "page_types" not in raw:
        problems.add("page_types: required (at least one page type)")
        return {}, False
    page_types_raw = problems.check(as_table, raw["page_types"], "page_types")
    if not page_types_raw:
        if page_types_raw is not None:
            problems.add("page_types: at least one page type is required")
        return {}, False
    before = len(problems.found)
    page_types: dict[str, Any] = {}
    for pt_name, pt in page_types_raw.items():
        if not _NAME.match(pt_name):
            problems.add(f"page_types.{pt_name}: page type names are [A-Za-z0-9_-], max 64")
            continue
        checked = problems.check(_page_type, pt, f"page_types.{pt_name}")
        if checked is not None:
            page_types[pt_name] = checked
    for pt_name, pt in page_types.items():
        target = pt.get("links", {}).get("page_type")
        if target is not None and target not in page_types_raw:
            problems.add(
                f"page_types.{pt_name}.links.page_type: {target!r} is not a defined page type",
            )
    return page_types, len(problems.found) == before


def _default_page_type(raw: dict[str, Any]) -> str | None:
    written = raw.get("page_types")
    if not isinstance(written, dict) or not written:
        return None  # page_types' own problem says why
    default_pt = raw.get("default_page_type", next(iter(written)))
    if default_pt not in written:
        raise SpecError(f"default_page_type: {default_pt!r} is not a defined page type")
    return default_pt


def _written_fields(raw: dict[str, Any]) -> set[str]:
    """Every field name the page types declare as written, checked or not."""
    names: set[str] = set()
    written = raw.get("page_types")
    for pt in written.values() if isinstance(written, dict) else ():
        fields = pt.get("fields") if isinstance(pt, dict) else None
        if isinstance(fields, dict):
            names.update(name for name in fields if isinstance(name, str))
    return names


def _entity_key(raw: dict[str, Any], all_fields: set[str]) -> dict[str, str]:
    entity = as_table(raw.get("entity_key", {"from": "url"}), "entity_key")
    no_unknown(entity, frozenset({"field", "from"}), "entity_key")
    if ("field" in entity) == ("from" in entity):
        raise SpecError('entity_key: give exactly one of field = "<name>" or from = "url"')
    if "from" in entity:
        if entity["from"] != "url":
            raise SpecError(f'entity_key.from: {entity["from"]!r} is not supported (use "url")')
        return {"from": "url"}
    field = as_text(entity["field"], "entity_key.field")
    if field not in all_fields:
        raise SpecError(f"entity_key.field: {field!r} is not a field of any page type")
    return {"field": field}


def _partition(raw: dict[str, Any]) -> dict[str, str]:
    partition = as_table(raw.get("partition", {"rule": "host"}), "partition")
    no_unknown(partition, frozenset({"rule"}), "partition")
    rule = as_text(partition.get("rule", "host"), "partition.rule")
    if rule.startswith("field:"):
        # Refused rather than accepted and ignored: tasks get their partition when the run is
        # created, before any page is extracted, and the engine does not move a task between
        # partitions at commit time (counters, batches and quarantine all key on it).
        raise SpecError(
            f"partition.rule: {rule!r}: partitioning by an extracted field is not supported; "
            "use manifest (a partition column) or host"
        )
    if rule not in ("host", "manifest"):
        raise SpecError(f"partition.rule: {rule!r} is not host or manifest")
    return {"rule": rule}


def _provider_options(raw: dict[str, Any], provider: str) -> dict[str, Any]:
    options = as_table(raw.get("provider_options", {}), "provider_options")
    for key in options:
        if _SECRET_NAME.search(key):
            raise SpecError(
                f"provider_options.{key}: looks like a credential; secrets come from the "
                "environment, never from a spec"
            )
    _check_provider_options(provider, options)
    return options


def _rules(raw: dict[str, Any], all_fields: set[str], problems: Problems) -> list[dict[str, Any]]:
    rules_raw = raw.get("rules", [])
    if not isinstance(rules_raw, list):
        problems.add("rules: must be an array of tables ([[rules]])")
        return []
    rules = []
    for i, rule_raw in enumerate(rules_raw):
        rule = problems.check(_rule, rule_raw, f"rules[{i}]", all_fields)
        if rule is not None:
            rules.append(rule)
    names = [r["name"] for r in rules]
    for i, n in enumerate(names):
        if n in names[:i]:
            problems.add(f"rules.{n}: rule names must be unique")
    return rules


def _refuse_unstorable(spec: dict[str, Any]) -> None:
    """Refuse what the checks above pass through but PostgreSQL's jsonb cannot store (the
    INSERT would fail: an HTTP 500, a traceback): a NUL in a text or a key, inf or nan in a
    number (an enum's values, provider_options). Named by dotted path, a rule by its name."""
    stack: list[tuple[str, Any]] = [(key, value) for key, value in spec.items() if key != "rules"]
    stack += [(f"rules.{rule['name']}", rule) for rule in spec["rules"]]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str) and "\x00" in value:
            raise SpecError(f"{where}: contains a NUL character")
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{where}: must be a finite number, got {value}")
        if isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    shown = key.replace("\x00", "\\x00")
                    raise SpecError(f"{where}.{shown}: a key contains a NUL character")
                stack.append((f"{where}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))


def check_bytes(data: bytes, name: str | Path) -> dict[str, Any]:
    """Parse and validate a spec; every SpecError names the file first, as loaddataset says."""
    raw = parse_bytes(data, name)  # its errors already name the file
    try:
        return validate(raw)
    except SpecError as exc:
        raise SpecError.of(exc.problems, prefix=f"{name}: ") from None


def check_file(path: str | Path) -> dict[str, Any]:
    """loaddataset's checks on a file (the same as an upload's, named by the path)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return check_bytes(data, path)


class Unconfirmed(Exception):
    """A new version of a dataset's spec that must be confirmed against its current version."""

    def __init__(self, dataset: Any) -> None:
        super().__init__(f"dataset {dataset.name}: confirm the new spec against the current one")
        self.dataset = dataset


def spec_sha256(spec: dict[str, Any]) -> str:
    """Hash of the normalised spec, so the same spec in TOML or JSON has one hash."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def save_dataset(
    spec: dict[str, Any], *, actor: str = "system", replaces: str | None = None
) -> tuple[Any, str]:
    """Create or update the Dataset named in a normalised spec.

    `replaces` (the dashboard's upload): a changed spec replaces the current one only if that
    is the version with this hash, checked under the row's lock, else Unconfirmed. None (the
    command line): no confirmation.

    Returns (dataset, "created" | "updated" | "unchanged"). Existing runs keep their task keys:
    keys hash the dataset *name*, which a reload cannot change. The audit entry keeps the whole
    normalised spec (it holds no credential: validate refuses them), so each version stays
    readable in the dataset's history.
    """
    from recovery import audit
    from recovery.models import Dataset

    digest = spec_sha256(spec)
    values = {
        "spec": spec,
        "spec_sha256": digest,
        "provider": spec["provider"],
        "auto_accept": spec["auto_accept"],
        "lease_seconds": None if spec["lease_seconds"] == "auto" else spec["lease_seconds"],
        "lease_auto": spec["lease_seconds"] == "auto",
        "max_attempts": spec["max_attempts"],
        "max_elapsed_seconds": spec["max_elapsed_seconds"],
    }
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().filter(name=spec["name"]).first()
        if dataset is None:
            dataset = Dataset.objects.create(name=spec["name"], **values)
            outcome = "created"
        elif dataset.spec_sha256 == digest:
            outcome = "unchanged"
        elif replaces is not None and replaces != dataset.spec_sha256:
            raise Unconfirmed(dataset)
        else:
            previous = dataset.spec_sha256
            values["updated_at"] = timezone.now()
            Dataset.objects.filter(pk=dataset.pk).update(**values)
            dataset.refresh_from_db()
            outcome = "updated"
        if outcome != "unchanged":
            audit.record(
                actor,
                f"dataset_{outcome}",
                dataset,
                spec_sha256=digest,
                spec=spec,
                **({"previous_sha256": previous} if outcome == "updated" else {}),
            )
            robots = spec.get("robots") or {}
            if robots.get("obey") is False:
                delay = "ignored" if robots.get("crawl_delay") is False else "honoured"
                audit.record(actor, "robots_opt_out", dataset, robots["reason"], crawl_delay=delay)
    return dataset, outcome


def load_dataset(path: str | Path) -> Any:
    """Parse, validate and store a spec file; returns the Dataset. Raises SpecError."""
    dataset, _outcome = save_dataset(validate(parse_file(path)))
    return dataset
