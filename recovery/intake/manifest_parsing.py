"""Reading a manifest: the whole file checked before anything is written.

A manifest is CSV (a header with `url` and optional `page_type`, `partition`, `priority`),
JSONL (one object a line with the same keys) or plain text (one URL a line; `#` starts a
comment). `parse` reads and checks the whole file and returns its entries, or raises
ManifestError naming the bad lines; recovery.intake.manifests writes what it returns.

Two spellings of one page (after keys.canonical_url) with the same page type are one task; the
later lines are collapsed and reported, never silently dropped.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from recovery import keys

WINDOW_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
COLUMNS = ("url", "page_type", "partition", "priority")
FORMATS = ("csv", "jsonl", "lines")
_EXTENSIONS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "lines"}
PRIORITY_RANGE = (-32768, 32767)  # Task.priority is a SmallIntegerField
PARTITION_MAX = 200
MAX_REPORTED_ERRORS = 10
MAX_DUPLICATE_EXAMPLES = 5


class ManifestError(ValueError):
    """Bad input for createrun; the message names the file and the line or option.

    `field` names the input at fault (dataset, window, scraper_version, add, manifest) and
    `problems` the first MAX_REPORTED_ERRORS bad lines, so a form can show each beside its
    field; the message stays the command line's.
    """

    def __init__(
        self, message: str, *, field: str = "manifest", problems: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.field = field
        self.problems = list(problems or [])


@dataclass(slots=True)
class Entry:
    line: int
    url: str  # canonical
    page_type: str
    partition: str
    priority: int
    task_key: str


@dataclass
class Duplicate:
    line: int
    first_line: int
    url: str
    page_type: str


@dataclass
class Manifest:
    format: str
    sha256: str
    entries: list[Entry]
    lines_read: int
    duplicates: int = 0
    duplicate_examples: list[Duplicate] = field(default_factory=list)


def check_window(window: str) -> str:
    if not isinstance(window, str) or not WINDOW_RE.match(window):
        raise ManifestError(
            f"--window {window!r}: use 1 to 64 characters from A-Z a-z 0-9 . _ : -",
            field="window",
        )
    return window


def detect_format(name: str | Path, text: str) -> str:
    """By extension (.csv, .jsonl/.ndjson, .txt: of the path, or of a URL's path whatever its
    query), else by content."""
    name = str(name)
    if "://" in name:
        name = urlsplit(name).path
    by_ext = _EXTENSIONS.get(Path(name).suffix.lower())
    if by_ext:
        return by_ext
    first = next((line.strip() for line in text.split("\n") if line.strip()), "")
    if first.startswith("{"):
        return "jsonl"
    header = [c.strip().lower() for c in next(csv.reader([first]), [])] if first else []
    if "url" in header and len(header) > 1:
        return "csv"
    return "lines"


def _raw_rows(fmt: str, text: str, errors: list[str]):
    """Yield (line number, {column: value}) from the manifest text.

    Lines are split on "\n" only: str.splitlines also breaks at form feeds and Unicode line
    separators, which would make the reported line numbers differ from an editor's.
    """
    if fmt == "lines":
        for number, line in enumerate(text.split("\n"), start=1):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                yield number, {"url": stripped}
    elif fmt == "jsonl":
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"line {number}: invalid JSON ({exc.msg})")
                continue
            except RecursionError:
                # The decoder recurses once a level: a line nested about a thousand deep
                # exhausts the stack. A manifest line is one flat object.
                errors.append(f"line {number}: nested too deeply (expected one flat JSON object)")
                continue
            if not isinstance(obj, dict):
                errors.append(f'line {number}: expected a JSON object with a "url" key')
                continue
            yield number, obj
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            errors.append(f"line 1: unreadable CSV header ({exc})")
            return
        names = [h.strip().lower() for h in header]
        if "url" not in names:
            errors.append(f"line 1: missing url column (header: {', '.join(header) or 'empty'})")
            return
        wanted = {name: names.index(name) for name in COLUMNS if name in names}
        start = reader.line_num + 1
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                errors.append(f"line {start}: unreadable CSV ({exc})")
                break
            number, start = start, reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            yield number, {n: cells[i] if i < len(cells) else "" for n, i in wanted.items()}


def _priority(value: Any) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"priority {value!r} must be an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"priority {value!r} must be an integer")
    low, high = PRIORITY_RANGE
    if not low <= value <= high:
        raise ValueError(f"priority {value} must be between {low} and {high}")
    return value


def _text(value: Any, column: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{column} must be a string")
    if "\x00" in value:  # PostgreSQL cannot store a NUL in text: the INSERT would fail
        raise ValueError(f"{column} contains a NUL character")
    return value.strip()


def parse(
    path: str | Path,
    *,
    dataset_name: str,
    spec: dict[str, Any],
    window: str,
    name: str | None = None,
) -> Manifest:
    """Read and check a whole manifest; raises ManifestError listing the bad lines.

    `name` is what messages call the file and what its format is guessed from (an upload's
    own file name, while `path` is where the upload was spooled); by default the path.
    """
    path = Path(path)
    # What messages call it: a URL stays a URL (a Path would fold its "//").
    label = name or str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{label}: cannot read manifest ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{label}: not UTF-8 (byte offset {exc.start})") from None

    fmt = detect_format(label, text)
    page_types = spec.get("page_types") or {}
    default_pt = spec.get("default_page_type") or next(iter(page_types), "page")
    rule = (spec.get("partition") or {}).get("rule", "host")

    errors: list[str] = []
    error_count = 0
    entries: list[Entry] = []
    first_line: dict[str, int] = {}
    hosts: dict[str, str] = {}
    duplicates: list[Duplicate] = []
    duplicate_count = 0
    lines_read = 0

    def bad(message: str) -> None:
        nonlocal error_count
        error_count += 1
        if len(errors) < MAX_REPORTED_ERRORS:
            errors.append(message)

    raw_errors: list[str] = []
    for number, row in _raw_rows(fmt, text, raw_errors):
        lines_read += 1
        url = row.get("url")
        if not isinstance(url, str) or not url.strip():
            bad(f"line {number}: missing url")
            continue
        try:
            canonical = keys.canonical_url(url)
        except keys.InvalidURL as exc:
            bad(f"line {number}: invalid URL {exc}")
            continue
        try:
            page_type = _text(row.get("page_type"), "page_type") or default_pt
            partition = _text(row.get("partition"), "partition")
            priority = _priority(row.get("priority"))
        except ValueError as exc:
            bad(f"line {number}: {exc}")
            continue
        if page_types and page_type not in page_types:
            bad(
                f"line {number}: page_type {page_type!r} is not in dataset {dataset_name!r} "
                f"({', '.join(page_types)})"
            )
            continue
        if not partition:
            if rule == "manifest":
                bad(f"line {number}: the dataset partitions by manifest column, but it is empty")
                continue
            # "host" (and field:<name>, whose value is known only after extraction) start with
            # the URL's host, so every task has a partition from the moment it exists.
            netloc = canonical.split("/", 3)[2]
            partition = hosts.get(netloc)
            if partition is None:  # one urlsplit per host, not per line
                partition = hosts[netloc] = urlsplit(canonical).hostname or ""
        if len(partition) > PARTITION_MAX:
            bad(f"line {number}: partition longer than {PARTITION_MAX} characters")
            continue
        key = keys.task_key_from_canonical(dataset_name, canonical, window, page_type)
        seen = first_line.get(key)
        if seen is not None:
            duplicate_count += 1
            if len(duplicates) < MAX_DUPLICATE_EXAMPLES:
                duplicates.append(Duplicate(number, seen, canonical, page_type))
            continue
        first_line[key] = number
        entries.append(Entry(number, canonical, page_type, partition, priority, key))

    for message in raw_errors:  # structural problems (header, JSON) come first in the report
        error_count += 1
        errors.insert(0, message)
    if error_count:
        more = f" (and {error_count - len(errors)} more)" if error_count > len(errors) else ""
        raise ManifestError(
            f"{label}: {error_count} bad line(s), nothing written: " + "; ".join(errors) + more,
            problems=errors + ([more.strip(" ()")] if more else []),
        )
    if not entries:
        raise ManifestError(f"{label}: the manifest has no URLs")
    return Manifest(
        format=fmt,
        sha256=hashlib.sha256(data).hexdigest(),
        entries=entries,
        lines_read=lines_read,
        duplicates=duplicate_count,
        duplicate_examples=duplicates,
    )
