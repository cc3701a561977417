"""Page-state checks: HTTP success is not data success (seed 002).

A 200 can carry a consent interstitial, a login wall, a bot challenge, a redesigned template or
an empty application shell. These checks run before extraction, configured per dataset page
type (docs/spec-format.md): each marker is a CSS selector and/or a case-insensitive regular
expression over the page's visible text.

Order matters, because a consent page also lacks the product template: the interstitials are
named first (challenge, login, consent: the most specific diagnosis wins), then the empty
shell (too little visible text), then the expected template. The first failure is reported.
"""

from __future__ import annotations

import re
from typing import Any

from selectolax.lexbor import LexborHTMLParser, SelectolaxError

from recovery.providers.base import ErrorClass

# Marker name -> the class it produces when *present* on the page.
PRESENT_MARKERS: tuple[tuple[str, ErrorClass], ...] = (
    ("challenge", ErrorClass.CHALLENGE),
    ("login", ErrorClass.LOGIN),
    ("consent", ErrorClass.CONSENT),
)
_INVISIBLE = ["script", "style", "noscript", "template"]


class PageCheckFailure(Exception):
    """The page is not the page the spec expects; `error_class` says what it is instead."""

    def __init__(self, error_class: ErrorClass, reason: str) -> None:
        super().__init__(reason)
        self.error_class = error_class
        self.reason = reason


class PageView:
    """A parsed page with its visible text computed once, on demand."""

    def __init__(self, tree: LexborHTMLParser) -> None:
        self.tree = tree
        self._visible: str | None = None

    @property
    def visible_text(self) -> str:
        if self._visible is None:
            # A clone, because extraction may still want <script> content (JSON-LD).
            clone = self.tree.clone()
            clone.strip_tags(_INVISIBLE)
            body = clone.body
            # separator/strip in lexbor: ~3x faster than collapsing whitespace in Python.
            self._visible = (
                body.text(deep=True, separator=" ", strip=True) if body is not None else ""
            )
        return self._visible

    @property
    def visible_chars(self) -> int:
        """Visible characters other than whitespace (what an empty shell lacks)."""
        text = self.visible_text
        return len(text) - sum(text.count(ch) for ch in " \n\t\r\f\xa0")


def _matches(view: PageView, marker: dict[str, Any]) -> str | None:
    """What matched (for the artefact), or None. A marker with both parts needs both."""
    found = []
    selector = marker.get("selector")
    if selector:
        try:
            if view.tree.css_first(selector) is None:
                return None
        except SelectolaxError:
            raise PageCheckFailure(
                ErrorClass.SELECTOR, f"invalid CSS selector {selector!r} in a page marker"
            ) from None
        found.append(f"selector {selector!r}")
    pattern = marker.get("text")
    if pattern:
        match = re.search(pattern, view.visible_text, re.IGNORECASE)
        if match is None:
            return None
        found.append(f"text {pattern!r} (matched {match.group(0)[:80]!r})")
    return " and ".join(found) or None


def check_page(view: PageView, page_spec: dict[str, Any]) -> None:
    """Raise PageCheckFailure when the page is not the page the spec expects."""
    for name, error_class in PRESENT_MARKERS:
        marker = page_spec.get(name)
        if marker:
            hit = _matches(view, marker)
            if hit:
                raise PageCheckFailure(error_class, f"{name} marker present: {hit}")
    shell = page_spec.get("empty_shell")
    if shell:
        visible = view.visible_chars
        if visible < shell["min_text_chars"]:
            raise PageCheckFailure(
                ErrorClass.EMPTY_SHELL,
                f"empty shell: {visible} visible characters, expected at least "
                f"{shell['min_text_chars']}",
            )
    expect = page_spec.get("expect")
    if expect and not _matches(view, expect):
        parts = [f"{k} {v!r}" for k, v in expect.items()]
        raise PageCheckFailure(
            ErrorClass.WRONG_TEMPLATE, f"expected template not found: {' and '.join(parts)}"
        )
