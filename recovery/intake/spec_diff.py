"""The diff an admin reads before a new spec replaces a dataset's current one (the dashboard's
upload shows it and asks to confirm; `loaddataset --diff` prints it and stores nothing).

Drawn between the normalised specs (what is stored, defaults filled in, keys sorted), not the
files: a change of format (TOML to JSON), of comments or of key order is no change, and a
default made explicit is none either, because the stored spec and its hash do not change.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

CONTEXT = 3  # unchanged lines shown around each change


@dataclass(frozen=True, slots=True)
class Line:
    kind: str  # "add", "del", "hunk", "file" or "same"
    text: str


def _text(spec: dict[str, Any]) -> list[str]:
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def lines(
    current: dict[str, Any], new: dict[str, Any], current_sha: str, new_sha: str
) -> list[Line]:
    out = []
    diff = difflib.unified_diff(
        _text(current),
        _text(new),
        fromfile=f"current {current_sha[:12]}",
        tofile=f"new {new_sha[:12]}",
        lineterm="",
        n=CONTEXT,
    )
    for text in diff:
        if text.startswith(("---", "+++")):
            kind = "file"
        elif text.startswith("@@"):
            kind = "hunk"
        else:
            kind = {"+": "add", "-": "del"}.get(text[:1], "same")
        out.append(Line(kind, text))
    return out
