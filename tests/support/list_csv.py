"""Reading a dashboard list's CSV as a client would: the rows, checked against the trailer."""

from __future__ import annotations

import csv
import io
import re

TRAILER = re.compile(r"# complete: (\d+) rows")


def list_rows(body: str | bytes) -> list[dict]:
    """The data rows of a whole list CSV; fails unless its last line is the trailer and the
    trailer's count is the number of rows before it."""
    text = body.decode() if isinstance(body, bytes) else body
    assert text.endswith("\n"), text[-200:]
    head, _, last = text[:-1].rpartition("\n")
    match = TRAILER.fullmatch(last)
    assert match, f"no trailer: the file ends {last[-200:]!r}"
    rows = list(csv.DictReader(io.StringIO(head + "\n")))
    assert len(rows) == int(match[1]), (len(rows), last)
    return rows
