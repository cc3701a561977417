"""The `sitemap` option of a dataset spec, checked (docs/spec-format.md, "Sitemaps").

    sitemap = { url, page_type?, lastmod_since?, rules? }
    rules = [{ pattern = "/product/", page_type = "product" }, ...]

`url` is a sitemap, a sitemap index, or an origin's `/robots.txt` (whose `Sitemap:` lines are
the files read). A listed URL takes the page type of the first rule whose pattern (a regular
expression, searched in the canonical URL) it matches, else `page_type`; without `page_type`
a URL no rule matches is skipped and counted. Reading is recovery.fetch.sitemaps.
"""

from __future__ import annotations

from typing import Any

from recovery import keys
from recovery.fetch import sitemaps
from recovery.intake.spec_checks import SpecError, as_regex, as_table, as_text, no_unknown

KEYS = frozenset({"url", "page_type", "lastmod_since", "rules"})
RULE_KEYS = frozenset({"pattern", "page_type"})
MAX_RULES = 100


def check(value: Any, page_types: dict[str, Any], provider: str) -> dict[str, Any]:
    """The normalised option; SpecError naming the key (`sitemap.rules[1].page_type: ...`)."""
    table = as_table(value, "sitemap")
    no_unknown(table, KEYS, "sitemap")
    if provider != "direct":
        raise SpecError(f'sitemap: sitemap discovery needs provider = "direct", not {provider!r}')
    if "url" not in table:
        raise SpecError("sitemap.url: required")
    try:
        url = keys.canonical_url(as_text(table["url"], "sitemap.url"))
    except keys.InvalidURL as exc:
        raise SpecError(f"sitemap.url: {exc}") from None
    rules = _rules(table.get("rules", []), page_types)
    if "page_type" not in table and not rules:
        raise SpecError("sitemap.page_type: required (or rules that give the page types)")
    # Stored even when absent (None): readers of the option (createrun's summary, the seed)
    # find the key whether or not rules give the page types.
    page_type = None
    if "page_type" in table:
        page_type = _page_type(table["page_type"], "sitemap.page_type", page_types)
    out: dict[str, Any] = {"url": url, "page_type": page_type}
    if rules:
        out["rules"] = rules
    if "lastmod_since" in table:
        try:
            out["lastmod_since"] = sitemaps.check_since(table["lastmod_since"])
        except ValueError as exc:
            raise SpecError(f"sitemap.lastmod_since: {exc}") from None
    return out


def _rules(value: Any, page_types: dict[str, Any]) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise SpecError("sitemap.rules: must be a list of { pattern, page_type } tables")
    if len(value) > MAX_RULES:
        raise SpecError(f"sitemap.rules: at most {MAX_RULES} rules, got {len(value)}")
    rules = []
    for i, item in enumerate(value):
        where = f"sitemap.rules[{i}]"
        rule = as_table(item, where)
        no_unknown(rule, RULE_KEYS, where)
        for key in ("pattern", "page_type"):
            if key not in rule:
                raise SpecError(f"{where}.{key}: required")
        rules.append(
            {
                "pattern": as_regex(rule["pattern"], f"{where}.pattern"),
                "page_type": _page_type(rule["page_type"], f"{where}.page_type", page_types),
            }
        )
    return rules


def _page_type(value: Any, where: str, page_types: dict[str, Any]) -> str:
    page_type = as_text(value, where)
    if page_type not in page_types:
        raise SpecError(f"{where}: {page_type!r} is not a defined page type")
    return page_type
