"""Where in an uploaded spec an error points: the line to mark beside the message.

TOML and JSON syntax errors carry their line; a validation error names a dotted key
(`page_types.product.fields.sku.requried: unknown key`), found here by walking the TOML's
tables and keys. A key defined in an inline table marks the line that opens it.
"""

from __future__ import annotations

import re

_AT_LINE = re.compile(r"\bline (\d+)\b")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=")


def _path(raw: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in raw.split("."))


def locate(text: str, message: str) -> int | None:
    """The 1-based line the message is about, or None when it cannot be told."""
    body = message.split(": ", 1)[1] if ": " in message else message
    found = _AT_LINE.search(body)
    if found:
        return int(found.group(1))
    key = body.split(":", 1)[0].strip()
    if not key or " " in key:
        return None
    table = ""
    arrays: dict[str, int] = {}
    best: tuple[int, int] | None = None  # (matched length, line)
    for number, line in enumerate(text.split("\n"), start=1):
        header = _HEADER.match(line)
        if header:
            name = _path(header.group(2))
            if header.group(1) == "[[":
                index = arrays.get(name, -1) + 1
                arrays[name] = index
                table = f"{name}[{index}]"
            else:
                table = name
            full = table
        else:
            assignment = _KEY.match(line)
            if not assignment:
                continue
            full = f"{table}.{_path(assignment.group(1))}" if table else _path(assignment.group(1))
        covers = key == full or key.startswith(full + ".") or key.startswith(full + "[")
        if covers and (best is None or len(full) > best[0]):
            best = (len(full), number)
    return best[1] if best else None
