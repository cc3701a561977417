"""Extraction: fields by CSS selector with type coercion, entity keys, links and cursors.

Pure functions over a parsed page (selectolax's lexbor engine, see pyproject). A missing
required field, a failed coercion or a selector the parser rejects is `ExtractionError`
(ErrorClass.SELECTOR), naming the field, so the task is quarantined with its partition and a
human repairs the spec (seed 002: "Selector, schema or required-field failure").

Numbers: `decimal` strips currency symbols and codes and thousands separators and keeps the
value as a string (exact; no float rounding). Both "1,234.50" and the European "1.234,50" are
read; a lone separator followed by exactly three digits ("1,234", "1.234") is read the English
way (comma = thousands, dot = decimal), since only the European form is ambiguous there.
"""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from selectolax.lexbor import LexborCSSSelector, LexborHTMLParser, LexborNode, SelectolaxError

from recovery.keys import InvalidURL, canonical_url
from recovery.outcomes import ErrorClass

MAX_FIELD_CHARS = 10_000  # a field is a value, not a page; longer text is truncated


class ExtractionError(Exception):
    """A selector/schema failure; names the field (or "links"/"cursor"/"entity_key")."""

    error_class = ErrorClass.SELECTOR

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r}: {reason}")
        self.field = field
        self.reason = reason


class CoercionError(ValueError):
    pass


# --- coercion ----------------------------------------------------------------------------------

_SPACES = "\u00a0\u202f\u2009 '\u2019"  # thousands separators that are not , or .
_NUMBER_CORE = re.compile(r"\d[\d.,\u00a0\u202f\u2009 '\u2019]*\d|\d")
# A minus directly before the number or its currency symbol ("-5", "-£5", "£-5"); a spaced
# dash ("Sale - £5") is punctuation, not a sign.
_SIGN_BEFORE = re.compile(r"[-\u2212][^\w\s]?$")


def _number_core(text: str) -> tuple[str, str]:
    """(sign, core) of the one number in text, e.g. ("-", "1,234.50") from "£-1,234.50"."""
    cores = _NUMBER_CORE.findall(text)
    if len(cores) != 1:
        raise CoercionError(
            f"no number in {text!r}" if not cores else f"more than one number in {text!r}"
        )
    core = cores[0]
    before = text[: text.index(core)]
    sign = "-" if _SIGN_BEFORE.search(before) else ""
    return sign, core


def _check_groups(groups: list[str], text: str) -> None:
    if not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:]):
        raise CoercionError(f"malformed thousands grouping in {text!r}")


def _split_groups(whole: str, text: str) -> str:
    """Digits of the integer part; every separator in it must be a thousands separator."""
    groups = re.split(r"[.,\u00a0\u202f\u2009 '\u2019]", whole)
    if len(groups) > 1:
        _check_groups(groups, text)
        if len({ch for ch in whole if not ch.isdigit()}) > 1:
            raise CoercionError(f"mixed thousands separators in {text!r}")
    return "".join(groups)


def parse_decimal(text: str) -> str:
    """Examples: "£1,234.50" -> "1234.50"; "1.234,50 €" -> "1234.50"; "N/A" fails."""
    sign, core = _number_core(text)
    commas, dots = core.count(","), core.count(".")
    spaced = any(sep in core for sep in _SPACES)
    if commas and dots:
        decimal_sep = "," if core.rfind(",") > core.rfind(".") else "."
    elif commas + dots == 1:
        sep = "," if commas else "."
        fraction = core.rpartition(sep)[2]
        # "1,234" is the English thousands form; "12,50", "12.5" and "1.234" are decimals.
        english_thousands = sep == "," and len(fraction) == 3 and not spaced
        decimal_sep = None if english_thousands else sep
    else:
        decimal_sep = None  # none, or one kind repeated ("1,234,567"): thousands only
    if decimal_sep:
        whole, _, fraction = core.rpartition(decimal_sep)
        if not fraction.isdigit():
            raise CoercionError(f"malformed decimal part in {text!r}")
    else:
        whole, fraction = core, ""
    digits = _split_groups(whole, text)
    try:
        value = Decimal(f"{sign}{digits}.{fraction}" if fraction else f"{sign}{digits}")
    except InvalidOperation:
        raise CoercionError(f"not a decimal: {text!r}") from None
    return str(value)


def parse_int(text: str) -> int:
    """Examples: "1,234" -> 1234; "12 reviews" -> 12; "1.5" fails."""
    sign, core = _number_core(text)
    return int(sign + _split_groups(core, text))


_TRUE = {"true", "yes", "y", "1", "on", "in stock", "instock", "available", "in_stock"}
_FALSE = {"false", "no", "n", "0", "off", "out of stock", "outofstock", "unavailable", "sold out"}


def parse_bool(text: str) -> bool:
    value = " ".join(text.lower().split())
    value = value.removeprefix("https://schema.org/").removeprefix("http://schema.org/")
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise CoercionError(f"not a boolean: {text!r}")


def parse_timestamp(text: str) -> str:
    """An ISO 8601 date-time, stored as ISO 8601 in UTC so every row compares and exports alike:
    "2026-12-01T09:30:00+01:00" -> "2026-12-01T08:30:00+00:00"; one without an offset is UTC
    (as the Parquet export reads it); a bare date is its midnight UTC."""
    try:
        moment = datetime.fromisoformat(" ".join(text.split()))
    except ValueError:
        raise CoercionError(f"not an ISO 8601 date-time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


COERCE = {
    "text": lambda s: s,
    "decimal": parse_decimal,
    "int": parse_int,
    "bool": parse_bool,
    "timestamp": parse_timestamp,
}


# --- fields ------------------------------------------------------------------------------------


_engine = threading.local()


def css_first(tree: LexborHTMLParser, selector: str) -> LexborNode | None:
    """tree.css_first(selector) for a parsed document (not a fragment), through one CSS engine
    per thread: selectolax makes an engine per document on its first query (~30 K
    instructions, ~0.15x the parse of a 5 KB page), and the engine holds no document state
    between queries. Raises SelectolaxError for a selector it cannot parse, as css_first does."""
    engine = getattr(_engine, "selector", None)
    if engine is None:
        engine = _engine.selector = LexborCSSSelector()
    root = tree.root
    if root is None:
        return None
    found = engine.find_first(selector, root)
    return found[0] if found else None


def _first(tree: LexborHTMLParser, selector: str, field: str) -> LexborNode | None:
    try:
        return css_first(tree, selector)
    except SelectolaxError:
        raise ExtractionError(field, f"invalid CSS selector {selector!r}") from None


def node_value(node: LexborNode, attr: str | None) -> str | None:
    if attr:
        value = node.attributes.get(attr)
        return None if value is None else " ".join(value.split())
    return " ".join(node.text(deep=True).split())


def extract_fields(tree: LexborHTMLParser, fields: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{field: coerced value or None}. Raises ExtractionError on the first failing field."""
    out: dict[str, Any] = {}
    for name, spec in fields.items():
        node = _first(tree, spec["selector"], name)
        raw = None if node is None else node_value(node, spec.get("attr"))
        if not raw:
            if spec.get("required"):
                what = f"attribute {spec['attr']!r} of " if spec.get("attr") else ""
                found = "matched nothing" if node is None else "is empty"
                raise ExtractionError(
                    name, f"required, but {what}selector {spec['selector']!r} {found}"
                )
            out[name] = None
            continue
        kind = spec.get("type", "text")
        try:
            out[name] = COERCE[kind](raw[:MAX_FIELD_CHARS])
        except CoercionError as exc:
            raise ExtractionError(name, f"cannot read as {kind}: {exc}") from None
    return out


def entity_key(spec: dict[str, Any], fields: dict[str, Any], url: str) -> str:
    """The entity key from the spec's `entity_key`: a field's value, or the canonical URL."""
    rule = spec.get("entity_key") or {"from": "url"}
    if "field" in rule:
        value = fields.get(rule["field"])
        if value is None or str(value).strip() == "":
            raise ExtractionError(rule["field"], "is the entity key but has no value")
        return str(value).strip()
    return canonical_url(url)


# --- links and cursors -------------------------------------------------------------------------


def base_url(tree: LexborHTMLParser, page_url: str) -> str:
    """The page's <base href> resolved against its URL, else the URL itself."""
    node = css_first(tree, "base[href]")
    if node is not None:
        href = (node.attributes.get("href") or "").strip()
        if href:
            return urljoin(page_url, href)
    return page_url


def resolve(href: str | None, base: str) -> str | None:
    """Canonical absolute http(s) URL for an href, or None for anything else."""
    if not href:
        return None
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    try:
        scheme = urlsplit(href).scheme.lower()
        if scheme and scheme not in ("http", "https"):
            return None  # javascript:, mailto:, data:, tel: ...
        return canonical_url(urljoin(base, href))
    except (InvalidURL, ValueError):
        return None  # a malformed href on someone else's page is skipped, never a crash


def extract_links(
    tree: LexborHTMLParser, links: dict[str, Any], page_url: str, *, limit: int = 1000
) -> list[str]:
    """Child URLs: resolved, canonical, deduplicated, filtered by the allow-list.

    `allow` holds regular expressions searched in the canonical URL; with no allow-list only
    links to the page's own host are followed (a crawl never wanders off-site by default).
    """
    try:
        nodes = tree.css(links["selector"])
    except SelectolaxError:
        raise ExtractionError("links", f"invalid CSS selector {links['selector']!r}") from None
    base = base_url(tree, page_url)
    try:
        patterns = [re.compile(p) for p in links.get("allow", [])]
    except re.error as exc:
        raise ExtractionError("links", f"invalid allow pattern: {exc}") from None
    own_host = urlsplit(canonical_url(page_url)).netloc
    seen: dict[str, None] = {}
    for node in nodes:
        url = resolve(node.attributes.get(links.get("attr", "href")), base)
        if url is None or url in seen:
            continue
        if patterns:
            if not any(p.search(url) for p in patterns):
                continue
        elif urlsplit(url).netloc != own_host:
            continue
        seen[url] = None
        if len(seen) >= limit:
            break
    return list(seen)


def extract_cursor(tree: LexborHTMLParser, cursor: dict[str, Any], page_url: str) -> str | None:
    """The next page's canonical URL, or None on the last page (or a link to itself)."""
    node = _first(tree, cursor["selector"], "cursor")
    if node is None:
        return None
    url = resolve(node.attributes.get(cursor.get("attr", "href")), base_url(tree, page_url))
    if url is None or url == canonical_url(page_url):
        return None
    return url


def offset_of(url: str, param: str = "offset") -> int | None:
    """The integer offset query parameter of a URL, if it has one."""
    for key, value in parse_qsl(urlsplit(url).query):
        if key == param and value.isdigit():
            return int(value)
    return None


def with_offset(url: str, offset: int, param: str = "offset") -> str:
    """The same listing URL at another offset (the other query parameters kept in order)."""
    parts = urlsplit(url)
    query = [(k, str(offset) if k == param else v) for k, v in parse_qsl(parts.query, True)]
    if not any(k == param for k, _v in query):
        query.append((param, str(offset)))
    return urlunsplit(parts._replace(query=urlencode(query)))


def listing_total(tree: LexborHTMLParser, total: dict[str, Any] | None) -> int | None:
    """The item count a listing page shows (the cursor's `total` selector), or None."""
    if not total:
        return None
    node = _first(tree, total["selector"], "cursor.total")
    if node is None:
        return None
    raw = node.attributes.get(total["attr"]) if total.get("attr") else node.text()
    digits = re.sub(r"[^0-9]", "", raw or "")
    return int(digits) if digits else None
