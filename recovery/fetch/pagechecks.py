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

import functools
import re
from typing import Any

from selectolax.lexbor import LexborHTMLParser, SelectolaxError

from recovery.fetch.extraction import css_first
from recovery.outcomes import ErrorClass

# Marker name -> the class it produces when *present* on the page.
PRESENT_MARKERS: tuple[tuple[str, ErrorClass], ...] = (
    ("challenge", ErrorClass.CHALLENGE),
    ("login", ErrorClass.LOGIN),
    ("consent", ErrorClass.CONSENT),
)
_INVISIBLE = ["script", "style", "noscript", "template"]
_WHITESPACE = " \n\t\r\f\xa0"  # what visible_chars does not count


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
            body = self.tree.body
            if body is not None and _holds_invisible(self.tree, body):
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
        return _solid_chars(self.visible_text)

    def has_visible_chars(self, minimum: int) -> bool:
        """visible_chars >= minimum, reading no more of the text than it must: when a prefix
        already holds `minimum` such characters, so does the whole (a 4 KB page's full count
        costs more than the rest of the empty-shell check)."""
        text = self.visible_text
        head = text[: 2 * minimum + 64]
        if len(head) < len(text) and _solid_chars(head) >= minimum:
            return True
        return _solid_chars(text) >= minimum


def _holds_invisible(tree: LexborHTMLParser, body: Any) -> bool:
    """Would strip_tags(_INVISIBLE) change the body? It removes exactly the elements that
    tree.tags() lists (the same lookup), so: is one of those inside the body? When none is (a
    <style> in the head is common), the body's text needs no clone of the whole document
    (a clone costs ~0.4x the parse)."""
    body_id = body.mem_id
    for name in _INVISIBLE:
        for node in tree.tags(name):
            parent = node.parent
            while parent is not None:
                if parent.mem_id == body_id:
                    return True
                parent = parent.parent
    return False


def _solid_chars(text: str) -> int:
    return len(text) - sum(text.count(ch) for ch in _WHITESPACE)


def _matches(view: PageView, marker: dict[str, Any]) -> str | None:
    """What matched (for the artefact), or None. A marker with both parts needs both."""
    found = []
    selector = marker.get("selector")
    if selector:
        try:
            if css_first(view.tree, selector) is None:
                return None
        except SelectolaxError:
            raise PageCheckFailure(
                ErrorClass.SELECTOR, f"invalid CSS selector {selector!r} in a page marker"
            ) from None
        found.append(f"selector {selector!r}")
    pattern = marker.get("text")
    if pattern:
        match = search_text(pattern, view.visible_text)
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
    if shell and not view.has_visible_chars(shell["min_text_chars"]):
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


# --- text markers ------------------------------------------------------------------------------
# A marker's text is searched case-insensitively in the whole visible text. Under IGNORECASE,
# Python's regex engine has no literal prefix to skip to when the pattern begins with a letter,
# so it tries every position of the text: ~0.4 M instructions for a 4 KB page, more than parsing
# it. A marker is almost always absent, and its literal parts show that cheaply: every match of
# `verify you are (a )?human` contains "verify you are " in some letter case, so when the text
# holds none of the case spellings of, say, " yo", there is no match. The full search runs only
# when every such piece is there, so the answer is re.search's.

# Characters other than ASCII letters that IGNORECASE folds onto an ASCII letter (dotted capital
# I, dotless i, long s, Kelvin sign); tests/unit/test_pagechecks.py checks that there are no
# others in Unicode.
_ASCII_FOLDS = "\u0130\u0131\u017f\u212a"
_PIECE = 3  # characters per piece of a literal run
_MAX_SPELLINGS = 16  # case spellings looked for per piece
_MAX_PIECES = 4  # pieces tried before the search itself


def search_text(pattern: str, text: str) -> re.Match | None:
    """re.search(pattern, text, re.IGNORECASE), answered without the search when a piece that
    every match contains is missing from the text."""
    compiled, pieces = _text_marker(pattern)
    for spellings in pieces:
        if not any(spelling in text for spelling in spellings):
            return None
    return compiled.search(text)


@functools.lru_cache(maxsize=256)
def _text_marker(pattern: str) -> tuple[re.Pattern, tuple[tuple[str, ...], ...]]:
    """The compiled marker, and pieces every match contains, each as all its case spellings
    (fewest first; none when the marker has no usable literal run)."""
    compiled = re.compile(pattern, re.IGNORECASE)
    try:
        from re import _constants, _parser  # the parse the compiled pattern was made from

        items = list(_parser.parse(pattern, re.IGNORECASE).data)
        literal = _constants.LITERAL
    except Exception:  # an unfamiliar parse: no shortcut, the plain search
        return compiled, ()
    # Runs of top-level literals: characters every match holds, consecutively.
    runs: list[list[set[str]]] = [[]]
    for op, av in items:
        folds = _ascii_folds(av) if op is literal else None
        if folds is None:
            runs.append([])
        else:
            runs[-1].append(folds)
    pieces = []
    for run in runs:
        at = 0
        while at < len(run) - 1:
            # The longest piece from here (2 or 3 characters) with few enough spellings.
            for size in (_PIECE, 2):
                spellings = {""}
                for folds in run[at : at + size]:
                    spellings = {head + ch for head in spellings for ch in folds}
                if len(spellings) <= _MAX_SPELLINGS:
                    pieces.append(tuple(sorted(spellings)))
                    break
            at += size
    pieces.sort(key=lambda spellings: (len(spellings), -len(spellings[0])))
    return compiled, tuple(pieces[:_MAX_PIECES])


@functools.cache
def _ascii_folds(code: int) -> set[str] | None:
    """Every character that the ASCII character `code` matches under IGNORECASE; None for
    other characters."""
    if code >= 128:
        return None
    char = chr(code)
    if not char.isalpha():
        return {char}
    literal = re.compile(re.escape(char), re.IGNORECASE)
    return {ch for ch in char.lower() + char.upper() + _ASCII_FOLDS if literal.fullmatch(ch)}
