"""Manifests: freeze a list of URLs into a run and its tasks (all or nothing).

A manifest is CSV (a header with `url` and optional `page_type`, `partition`, `priority`),
JSONL (one object a line with the same keys) or plain text (one URL a line; `#` starts a
comment). The whole file is read and checked before anything is written, then the run and its
tasks are inserted in one transaction, so bad input leaves the database exactly as it was.

Two spellings of one page (after keys.canonical_url) with the same page type are one task; the
later lines are collapsed and reported, never silently dropped.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from recovery import counters, keys, sitemaps

WINDOW_RE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
COLUMNS = ("url", "page_type", "partition", "priority")
FORMATS = ("csv", "jsonl", "lines")
_EXTENSIONS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "lines"}
PRIORITY_RANGE = (-32768, 32767)  # Task.priority is a SmallIntegerField
PARTITION_MAX = 200
MAX_REPORTED_ERRORS = 10
MAX_DUPLICATE_EXAMPLES = 5
CHUNK = 10_000  # rows per insert batch
# Task keys per "already in the run?" query of --add: below SQLite's oldest parameter limit.
KEY_LOOKUP = 900


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


FORMAT_NAMES = {"csv": "CSV", "jsonl": "JSON", "lines": "text", "none": "manifest"}


@dataclass
class CreateRunResult:
    run: Any
    created: bool  # a new run (False: tasks added to an existing run)
    tasks_added: int
    already_present: int  # --add: task keys the run already had
    manifest: Manifest
    sitemap: dict[str, Any] | None = None  # the sitemap the run was seeded with

    def summary(self) -> list[str]:
        """What createrun prints before the run id (the dashboard shows the same lines)."""
        run, m = self.run, self.manifest
        verb = "created" if self.created else "extended"
        line = f"run {run.pk} {run.dataset.name}@{run.window} {verb}: {self.tasks_added} task(s) "
        if m.format == "none":
            line += "added (no manifest)"
        else:
            line += (
                f"added from {m.lines_read} {FORMAT_NAMES[m.format]} line(s), "
                f"manifest sha256 {m.sha256[:12]}"
            )
        if self.already_present:
            line += f", {self.already_present} already in the run"
        lines = [line]
        if m.duplicates:
            examples = "; ".join(
                f"line {d.line} repeats line {d.first_line} ({d.url} [{d.page_type}])"
                for d in m.duplicate_examples
            )
            lines.append(f"{m.duplicates} duplicate URL(s) collapsed: {examples}")
        if self.sitemap:
            since = self.sitemap.get("lastmod_since")
            lines.append(
                f"sitemap discovery from {self.sitemap['url']} "
                f"(page type {self.sitemap['page_type']}"
                + (f", lastmod since {since}" if since else "")
                + "): its URLs become tasks as workers read the sitemap files"
            )
        return lines


def check_window(window: str) -> str:
    if not isinstance(window, str) or not WINDOW_RE.match(window):
        raise ManifestError(
            f"--window {window!r}: use 1 to 64 characters from A-Z a-z 0-9 . _ : -",
            field="window",
        )
    return window


def detect_format(path: Path, text: str) -> str:
    """By extension (.csv, .jsonl/.ndjson, .txt), else by content."""
    by_ext = _EXTENSIONS.get(path.suffix.lower())
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
    label = Path(name) if name else path
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


def create_run(
    dataset_name: str,
    window: str,
    manifest_path: str | Path | None,
    *,
    add: bool = False,
    scraper_version: str | None = None,
    actor: str = "system",
    on_progress: Callable[[int, int], None] | None = None,
    name: str | None = None,
    sitemap_url: str | None = None,
) -> CreateRunResult:
    """Freeze a manifest into a new run (or, with add=True, add its new task keys to the run).

    Raises ManifestError on bad input, before any write. `on_progress(done, total)` is called
    as the parsed entries are written (a terminal progress bar for big manifests). `name`: what
    messages call the manifest (an upload's file name; by default its path).

    Sitemap discovery (recovery.sitemaps): a dataset whose spec has `sitemap` (or a call with
    `sitemap_url`, a schedule's `sitemap:` source) also gets one task for that sitemap file;
    the manifest is then optional (`manifest_path` None).
    """
    from recovery import audit
    from recovery.models import Dataset, Run
    from recovery.states import run as run_states
    from recovery.states.task import TaskState

    check_window(window)
    if scraper_version is not None and not (0 < len(scraper_version) <= 64):
        raise ManifestError("--scraper-version: 1 to 64 characters", field="scraper_version")
    dataset = Dataset.objects.filter(name=dataset_name).first()
    if dataset is None:
        known = ", ".join(Dataset.objects.order_by("name").values_list("name", flat=True)[:20])
        raise ManifestError(
            f"unknown dataset {dataset_name!r} (known: {known or 'none; run loaddataset first'})",
            field="dataset",
        )
    existing = Run.objects.filter(dataset=dataset, window=window).first()
    if existing is not None and not add:
        raise ManifestError(
            f"run {existing.pk} already exists for {dataset_name}@{window}: its manifest is "
            "frozen; use --add to add new URLs to it, or choose another window",
            field="window",
        )
    if existing is not None:
        _check_addable(existing, scraper_version)

    spec = dataset.spec or {}
    sitemap = sitemap_config(spec, sitemap_url)
    if manifest_path is not None:
        manifest = parse(
            manifest_path, dataset_name=dataset.name, spec=spec, window=window, name=name
        )
    elif sitemap is not None:
        manifest = Manifest("none", hashlib.sha256(sitemap["url"].encode()).hexdigest(), [], 0)
    else:
        raise ManifestError(
            f"--manifest: required (dataset {dataset_name!r} has no sitemap in its spec)"
        )
    now = timezone.now()
    try:
        with transaction.atomic():
            if existing is None:
                run = Run.objects.create(
                    dataset=dataset,
                    window=window,
                    scraper_version=scraper_version or str(spec.get("scraper_version", "1")),
                    schema_version=str(spec.get("schema_version", "1")),
                    manifest_sha256=manifest.sha256,
                    manifest_frozen_at=now,
                    created_at=now,
                )
                created = True
            else:
                # Lock the run so two concurrent --add calls serialise on it.
                run = Run.objects.select_for_update().get(pk=existing.pk)
                _check_addable(run, scraper_version)
                created = False
            added, present, per_partition = _insert_tasks(
                run, manifest.entries, now, created, on_progress
            )
            if sitemap is not None:
                partition = _sitemap_partition(sitemap["url"], spec)
                seeded = sitemaps.seed(
                    run,
                    url=sitemap["url"],
                    page_type=sitemap["page_type"],
                    since=sitemap.get("lastmod_since"),
                    partition=partition,
                    now=now,
                )
                added += seeded
                present += 1 - seeded
                if seeded:
                    per_partition[partition] = per_partition.get(partition, 0) + 1
            if added:
                Run.objects.filter(pk=run.pk).update(task_total=F("task_total") + added)
                counters.record(
                    (run.pk, partition, None, TaskState.PENDING, n)
                    for partition, n in per_partition.items()
                )
                if not created and run.acceptance_state in (
                    run_states.RunState.CANDIDATE,
                    run_states.RunState.REJECTED,
                ):
                    # New intended work: the run must be judged again once it is terminal.
                    run_states.move(
                        run.pk,
                        run.acceptance_state,
                        run_states.RunState.COLLECTING,
                        state_reason=f"{added} task(s) added from a manifest",
                    )
            audit.record(
                actor,
                "run_created" if created else "run_tasks_added",
                run,
                manifest_sha256=manifest.sha256,
                manifest_format=manifest.format,
                tasks_added=added,
                already_present=present,
                duplicates=manifest.duplicates,
            )
    except IntegrityError as exc:
        # A concurrent createrun for the same window, or a concurrent discovery of the same
        # key: the transaction rolled back, nothing was written.
        raise ManifestError(
            f"{dataset_name}@{window} changed while the manifest was being written ({exc}); "
            "nothing was written, retry with --add"
        ) from None
    run.refresh_from_db()
    return CreateRunResult(run, created, added, present, manifest, sitemap)


def sitemap_config(spec: dict[str, Any], url: str | None = None) -> dict[str, Any] | None:
    """The sitemap a new run starts from: `url` (a schedule's `sitemap:` source) with the
    spec's page type and lastmod_since (else its default page type), or the spec's own."""
    own = spec.get("sitemap")
    if url is None:
        return own
    try:
        canonical = keys.canonical_url(url)
    except keys.InvalidURL as exc:
        raise ManifestError(f"sitemap URL: {exc}") from None
    if own:
        return {**own, "url": canonical}
    page_type = spec.get("default_page_type") or next(iter(spec.get("page_types") or {}), "")
    return {"url": canonical, "page_type": page_type}


def _sitemap_partition(url: str, spec: dict[str, Any]) -> str:
    # Its URLs take their own host's partition (rule "host") or inherit this one ("manifest").
    if (spec.get("partition") or {}).get("rule", "host") == "manifest":
        return "sitemap"
    return urlsplit(url).hostname or ""


def _check_addable(run, scraper_version: str | None) -> None:
    from recovery.states.run import AVAILABLE

    if run.acceptance_state in AVAILABLE:
        raise ManifestError(
            f"run {run.pk} is {run.acceptance_state}: its dataset is fixed; "
            "use a new window or a recovery batch",
            field="add",
        )
    if scraper_version is not None and scraper_version != run.scraper_version:
        raise ManifestError(
            f"--scraper-version {scraper_version!r}: run {run.pk} was created with "
            f"{run.scraper_version!r}; a version applies to a whole run",
            field="scraper_version",
        )


def _insert_tasks(
    run, entries: list[Entry], now, created: bool, on_progress=None
) -> tuple[int, int, dict]:
    from recovery.models import Task

    per_partition: dict[str, int] = {}
    added = present = 0
    insert = _TaskInsert(run.pk, now)
    for start in range(0, len(entries), CHUNK):
        if on_progress is not None:
            on_progress(start, len(entries))
        chunk = entries[start : start + CHUNK]
        if not created:
            have: set[str] = set()
            for i in range(0, len(chunk), KEY_LOOKUP):
                wanted = [e.task_key for e in chunk[i : i + KEY_LOOKUP]]
                have.update(
                    Task.objects.filter(run=run, task_key__in=wanted).values_list(
                        "task_key", flat=True
                    )
                )
            present += len(have)
            chunk = [e for e in chunk if e.task_key not in have]
        if not chunk:
            continue
        insert.execute(chunk)
        added += len(chunk)
        for e in chunk:
            per_partition[e.partition] = per_partition.get(e.partition, 0) + 1
    if on_progress is not None:
        on_progress(len(entries), len(entries))
    return added, present, per_partition


class _TaskInsert:
    """Insert new tasks with the database's fastest bulk path; constant columns prepared once.

    Measured on 100,000 rows (bench/manifest.py): Task.objects.bulk_create spent most of its
    time preparing 22 columns per row, and on PostgreSQL psycopg re-parsed each huge multi-row
    statement in Python. Here the columns come from Task._meta and every column but the five
    that vary per line is prepared once through the field itself (pre_save +
    get_db_prep_save, as bulk_create does), so a field added to Task later gets its default
    exactly as bulk_create would give it. PostgreSQL loads the rows with COPY; SQLite runs one
    prepared INSERT through executemany. Both stay inside the caller's transaction.
    """

    VARYING = ("task_key", "url", "page_type", "partition", "priority")

    def __init__(self, run_id: int, now) -> None:
        from django.db import connection

        from recovery.models import Task

        template = Task(run_id=run_id, next_attempt_at=now, created_at=now, state_changed_at=now)
        fields = [f for f in Task._meta.concrete_fields if not f.primary_key]
        self.columns = [f.column for f in fields]
        # Per column: ("row", index into VARYING) or ("const", prepared value).
        self.slots: list[tuple[str, Any]] = []
        for f in fields:
            if f.attname in self.VARYING:
                self.slots.append(("row", self.VARYING.index(f.attname)))
            else:
                value = f.get_db_prep_save(f.pre_save(template, add=True), connection)
                self.slots.append(("const", value))
        quote = connection.ops.quote_name
        self.table = quote(Task._meta.db_table)
        self.column_sql = ", ".join(quote(c) for c in self.columns)
        self.vendor = connection.vendor

    def rows(self, chunk: list[Entry]):
        slots = self.slots
        for e in chunk:
            # Varying values are plain str/int checked by parse(); no field prep needed.
            row = (e.task_key, e.url, e.page_type, e.partition, e.priority)
            yield tuple(row[v] if kind == "row" else v for kind, v in slots)

    def execute(self, chunk: list[Entry]) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            if self.vendor == "postgresql":
                sql = f"COPY {self.table} ({self.column_sql}) FROM STDIN"
                with cursor.cursor.copy(sql) as copy:
                    for row in self.rows(chunk):
                        copy.write_row(row)
            else:
                marks = ", ".join(["%s"] * len(self.columns))
                cursor.executemany(
                    f"INSERT INTO {self.table} ({self.column_sql}) VALUES ({marks})",
                    list(self.rows(chunk)),
                )
