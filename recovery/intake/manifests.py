"""Manifests: freeze a list of URLs into a run and its tasks (all or nothing).

The manifest is read and checked whole first (recovery.intake.manifest_parsing: CSV, JSONL or
plain text), before anything is written; then the run and its tasks are inserted in one
transaction, so bad input leaves the database exactly as it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from recovery import counters, keys
from recovery.fetch import sitemaps
from recovery.intake.manifest_parsing import Entry, Manifest, ManifestError, check_window, parse

CHUNK = 10_000  # rows per insert batch
# Task keys per "already in the run?" query of --add: below SQLite's oldest parameter limit.
KEY_LOOKUP = 900

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

    Sitemap discovery (recovery.fetch.sitemaps): a dataset whose spec has `sitemap` (or a call with
    `sitemap_url`, a schedule's `sitemap:` source) also gets one task for that sitemap file;
    the manifest is then optional (`manifest_path` None).
    """
    from recovery import audit
    from recovery.models import Dataset, Run
    from recovery.states import run as run_states
    from recovery.states.choices import TaskState

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
