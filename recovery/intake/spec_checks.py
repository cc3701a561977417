"""The value checks a dataset spec is made of (recovery.intake.specs and spec_sitemap use them).

Each takes the raw value and the key's dotted path, returns the value as the stored spec keeps
it, and raises SpecError naming that path: `page_types.product.fields.sku.type: ...`.
"""

from __future__ import annotations

import math
import re
from typing import Any

# The largest integer a spec setting may hold: Dataset's and Run's PositiveIntegerField columns
# (lease_seconds, max_attempts, max_elapsed_seconds) are a 32-bit integer on PostgreSQL, and a
# larger value would fail at the INSERT (an HTTP 500, a traceback) instead of naming the key.
INT_MAX = 2_147_483_647


class SpecError(ValueError):
    """A spec that cannot be loaded; the message names the key (e.g. `page_types.product`).

    `problems` holds every problem found (recovery.intake.specs.validate checks each part of a
    spec on its own, so an upload shows them all at once); the message is them, one a line.
    """

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]

    @classmethod
    def of(cls, problems: list[str], prefix: str = "") -> SpecError:
        named = [f"{prefix}{problem}" for problem in problems]
        return cls("\n".join(named), named)


class Problems:
    """Collects the SpecError of each independent check instead of stopping at the first."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def check(self, func, *args, **kwargs):
        """func's value, or None (its problems recorded) when it raises SpecError."""
        try:
            return func(*args, **kwargs)
        except SpecError as exc:
            self.found.extend(exc.problems)
            return None

    def add(self, message: str) -> None:
        self.found.append(message)

    def raise_any(self) -> None:
        if self.found:
            raise SpecError.of(self.found)


def as_table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: must be a table, got {type(value).__name__}")
    return value


def no_unknown(table: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        prefix = f"{where}." if where else ""
        raise SpecError(
            f"{prefix}{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
        )


def as_text(value: Any, where: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise SpecError(f"{where}: must be a non-empty string")
    return value


def as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: must be true or false")
    return value


def as_int(value: Any, where: str, *, minimum: int, maximum: int = INT_MAX) -> int:
    # bool is an int in Python; `true` where a number belongs is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: must be an integer")
    if value < minimum:
        raise SpecError(f"{where}: must be >= {minimum}, got {value}")
    if value > maximum:
        raise SpecError(f"{where}: must be between {minimum} and {maximum}, got {value}")
    return value


def as_number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(f"{where}: must be a number")
    # TOML's inf and nan (JSON's Infinity and NaN) are floats: a bound no value can cross, or
    # one every comparison fails, and PostgreSQL's jsonb cannot store either.
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{where}: must be a finite number, got {value}")
    return value


def as_regex(value: Any, where: str) -> str:
    pattern = as_text(value, where)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise SpecError(f"{where}: invalid regular expression: {exc}") from None
    return pattern


def as_version(value: Any, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    version = as_text(value, where)
    if len(version) > 64:
        raise SpecError(f"{where}: at most 64 characters")
    return version


_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


def as_selector(value: Any, where: str) -> str:
    """A CSS selector the extraction engine can run, checked now rather than on the first page."""
    from selectolax.lexbor import LexborHTMLParser, SelectolaxError

    selector = as_text(value, where)
    # lexbor forgives an unclosed bracket ("div[x" matches nothing, silently): refuse it here.
    bare = _QUOTED.sub("", selector)
    if bare.count("[") != bare.count("]") or bare.count("(") != bare.count(")"):
        raise SpecError(f"{where}: unbalanced brackets in CSS selector {selector!r}")
    try:
        LexborHTMLParser("<p></p>").css_first(selector)
    except SelectolaxError:
        raise SpecError(f"{where}: invalid CSS selector {selector!r}") from None
    return selector
