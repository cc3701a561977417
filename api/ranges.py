"""HTTP byte ranges (RFC 9110 §14): the one range a resumed download asks for.

Only a single range is served; a request for several ranges gets the whole file (a server may
ignore Range, §14.2), which no resuming client asks for anyway.
"""

from __future__ import annotations

import re

_SINGLE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Unsatisfiable(ValueError):
    """A well-formed range that selects nothing of the file: 416."""


def parse(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte positions, inclusive, of the one range `header` asks for in a file of
    `size` bytes; None when there is no usable Range (serve everything)."""
    if not header:
        return None
    match = _SINGLE.match(header.strip())
    if not match or (not match.group(1) and not match.group(2)):
        return None  # malformed, another unit or several ranges: ignored
    first_text, last_text = match.groups()
    if not first_text:  # bytes=-N: the last N bytes
        length = int(last_text)
        if length == 0 or size == 0:
            raise Unsatisfiable(header)
        return max(size - length, 0), size - 1
    first = int(first_text)
    last = int(last_text) if last_text else size - 1
    if last < first:
        return None  # invalid: ignored
    if first >= size:
        raise Unsatisfiable(header)
    return first, min(last, size - 1)


def etag_matches(header: str | None, tag: str) -> bool:
    """Whether an If-None-Match list names the quoted tag `tag` (weak comparison, `*`)."""
    if not header:
        return False
    if header.strip() == "*":
        return True
    names = {part.strip().removeprefix("W/") for part in header.split(",")}
    return tag in names
