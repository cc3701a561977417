"""Making the runs that schedules call for: the dispatcher's side of recovery.intake.schedules.

`run_due(now)` (the dispatcher calls it after each tick, recovery.dispatch) creates what is
due (recovery.intake.recurrence). Exactly once, whatever happens:
- the manifest is materialised first, outside any transaction (a file path; an http(s) URL
  fetched through the guarded client; or "previous": the previous window's manifest plus what
  its run discovered); a failure is recorded on the schedule (`last_error`, `failures`) and
  retried after a backoff, and no run is made. A `sitemap:<http(s) URL>` source needs no
  manifest: the run starts with that sitemap file as its one task (recovery.fetch.sitemaps), and the
  workers read it through the guarded client like any page;
- then one transaction moves the schedule from the `last_due_at` it read to the new instant
  (a guarded UPDATE: a second dispatcher that read the same value updates nothing and stops)
  and creates the run; the run's unique (dataset, window) is the fence, so a run that exists
  already (a crash after commit, a manual `createrun`) is adopted, never duplicated. A crash
  before the commit leaves both unchanged, and the next call does the same work again.
Windows a pause skipped make no run: once nothing before them is left to make, the schedule's
place moves past them (`move_place`). A due instant that names the last window made again (a
window format saved before repeats were refused) is recorded as the schedule's error, not
silently adopted.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from recovery import failures
from recovery.delivery.outbox import public_text
from recovery.fetch import sitemaps
from recovery.intake import manifest_credentials as credentials
from recovery.intake import manifests, recurrence
from recovery.intake.recurrence import ScheduleError
from recovery.models import Run, Schedule, Task
from recovery.ops.logs import redact

log = logging.getLogger(__name__)

# The manifest sources that are not a file or a URL (recovery.intake.schedules checks them).
PREVIOUS = "previous"
SITEMAP_PREFIX = "sitemap:"
RETRY_BASE = 60.0  # seconds: a failed manifest fetch is retried after backoff(failures)
RETRY_CAP = 3600.0
_last_check = {"at": -1e9}


def run_due(now: datetime | None = None) -> int:
    """Create the runs that are due on every active schedule; returns how many were made."""
    now = now or timezone.now()
    made = 0
    active = Schedule.objects.select_related("dataset").filter(paused=False)
    for schedule in active.filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now)):
        found = recurrence.scan(schedule, now)
        windows = recurrence.catch_up(schedule, found.pending)
        if not windows:
            _nothing_due(schedule, found.repeat, now)
            continue
        for instant, window in windows:
            outcome = _make(schedule, instant, window, now)
            if outcome is None:
                break  # failed (recorded) or another dispatcher advanced it: stop here
            made += outcome
            schedule.refresh_from_db()
    return made


def _make(schedule: Schedule, instant: datetime, window: str, now: datetime) -> int | None:
    """1 if a run was created, 0 if the window's run existed, None if nothing moved."""
    existing = Run.objects.filter(dataset_id=schedule.dataset_id, window=window).first()
    if existing is not None:  # made before a crash, or by hand: adopted, never duplicated
        return 0 if _advance(schedule, instant, window, existing) else None
    try:
        with materialised(schedule) as (path, name), transaction.atomic():
            if not _advance(schedule, instant, window, None):
                return None
            result = manifests.create_run(
                schedule.dataset.name,
                window,
                path,
                name=name,
                actor=f"schedule:{schedule.name}",
                sitemap_url=sitemap_source(schedule),
            )
            Schedule.objects.filter(pk=schedule.pk).update(last_run=result.run)
        return 1
    except (manifests.ManifestError, ScheduleError, OSError) as exc:
        _record_failure(schedule, f"{window}: {exc}", now)
        return None


def _advance(schedule: Schedule, instant: datetime, window: str, run: Run | None) -> bool:
    """The guarded move of last_due_at: False when another dispatcher moved it first."""
    current = (
        Q(last_due_at__isnull=True)
        if schedule.last_due_at is None
        else Q(last_due_at=schedule.last_due_at)
    )
    values = {
        "last_due_at": instant,
        "last_window": window,
        "failures": 0,
        "last_error": "",
        "retry_at": None,
        "updated_at": timezone.now(),
    }
    if run is not None:
        values["last_run"] = run
    return bool(Schedule.objects.filter(current, pk=schedule.pk, paused=False).update(**values))


def move_place(schedule: Schedule, instant: datetime) -> bool:
    """Move the schedule's place (last_due_at) forward to `instant` without making a run:
    guarded like `_advance`, so a dispatcher that moved it meanwhile wins."""
    current = (
        Q(last_due_at__isnull=True)
        if schedule.last_due_at is None
        else Q(last_due_at=schedule.last_due_at)
    )
    return bool(Schedule.objects.filter(current, pk=schedule.pk).update(last_due_at=instant))


def _nothing_due(schedule: Schedule, again: datetime | None, now: datetime) -> None:
    """Nothing to make: move the place past what a pause skipped, and report an instant that
    names the last window again (`again`)."""
    if schedule.resumed_at is not None and recurrence.place(schedule) < schedule.resumed_at:
        to = recurrence.place_after_pause(schedule, now)
        if to is not None:
            move_place(schedule, to)
            return  # a repeat, if any, is found from the new place at the next check
    if again is None or schedule.last_due_at is None:
        return
    zone = ZoneInfo(schedule.time_zone)
    first, second = (recurrence.local_label(i, zone, True) for i in (schedule.last_due_at, again))
    message = (
        f"window format {schedule.window_format!r} repeats: {first} and {second} are both "
        f"{schedule.last_window!r}, so no run was made for {second}; change the window format"
    )
    if move_place(schedule, again):
        Schedule.objects.filter(pk=schedule.pk).update(
            last_error=message, updated_at=timezone.now()
        )


def _record_failure(schedule: Schedule, message: str, now: datetime) -> None:
    wait = max(RETRY_BASE, failures.backoff(schedule.failures + 1, RETRY_BASE, RETRY_CAP))
    Schedule.objects.filter(pk=schedule.pk).update(
        failures=F("failures") + 1,
        # Stored as shown: a manifest fetch error quotes its URL, credentials included.
        last_error=public_text(message)[:2000],
        retry_at=now + timedelta(seconds=wait),
        updated_at=timezone.now(),
    )


def sitemap_source(schedule: Schedule) -> str | None:
    """The sitemap URL of a `sitemap:` source, else None."""
    source = schedule.manifest_source
    return source.removeprefix(SITEMAP_PREFIX) if source.startswith(SITEMAP_PREFIX) else None


@contextlib.contextmanager
def materialised(schedule: Schedule) -> Iterator[tuple[str | None, str]]:
    """(path, name) of the window's manifest, removed afterwards if it was made here; no path
    for a `sitemap:` source (the run's sitemap task is its manifest)."""
    source = schedule.manifest_source
    if source.startswith(SITEMAP_PREFIX):
        yield None, source
        return
    if source == PREVIOUS:
        text = _previous_manifest(schedule)
        suffix, name = ".csv", f"the run of window {schedule.last_window}"
    elif urlsplit(source).scheme.lower() in ("http", "https"):
        body = asyncio.run(_fetch(credentials.filled(source), shown=source))
        suffix = Path(urlsplit(source).path).suffix.lower() or ".txt"
        if suffix not in (".csv", ".jsonl", ".ndjson", ".txt"):
            suffix = ".txt"
        text, name = body, source
    else:
        yield source, source
        return
    fd, path = tempfile.mkstemp(prefix="salvage-schedule-", suffix=suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        yield path, name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


async def _fetch(url: str, shown: str) -> str:
    """The manifest at `url`; errors name it as `shown` (the source as stored, its
    credentials still placeholders)."""
    from recovery.fetch.errors import FetchError
    from recovery.fetch.fetcher import Fetcher

    fetcher = Fetcher(per_host=1)
    try:
        page = await fetcher.fetch(url)
    except FetchError as exc:
        raise ScheduleError("manifest", f"{shown}: {redact(exc.detail)}") from None
    finally:
        await fetcher.aclose()
    if not 200 <= page.status < 300:
        raise ScheduleError("manifest", f"{shown}: HTTP {page.status}")
    try:
        return page.body.decode("utf-8")
    except UnicodeDecodeError:
        raise ScheduleError("manifest", f"{shown}: the manifest is not UTF-8") from None


def _previous_manifest(schedule: Schedule) -> str:
    previous = schedule.last_run_id and Run.objects.filter(pk=schedule.last_run_id).first()
    if not previous:
        raise ScheduleError("manifest", "'previous': no previous window's run to copy from")
    rows = (
        Task.objects.filter(run=previous)
        .exclude(discovery__in=(Task.Discovery.CURSOR, Task.Discovery.OFFSET))
        # A sitemap file is no page: a new run reads its sitemaps afresh (its own seed).
        .exclude(page_type=sitemaps.SITEMAP_PAGE_TYPE)
        .order_by("pk")
        .values_list("url", "page_type", "partition")
    )
    lines: list[list[str]] = [["url", "page_type", "partition"]]
    lines.extend([url, page_type, partition] for url, page_type, partition in rows.iterator())
    out = _Lines()
    csv.writer(out).writerows(lines)
    return "".join(out.parts)


class _Lines:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)


def dispatch_hook() -> int:
    """Dispatcher tick hook: after the tick commits, create the runs that are due (in the
    dispatcher's process, outside the tick's transaction: a manifest fetch is network I/O)."""
    from django.conf import settings

    now = time.monotonic()
    if now - _last_check["at"] >= settings.SALVAGE_SCHEDULE_CHECK_SECONDS:
        _last_check["at"] = now
        transaction.on_commit(_run_due_logged)
    return 0


def _run_due_logged() -> None:
    try:
        made = run_due()
    except Exception:  # a bug here must not stop the dispatcher's ticks
        log.exception("schedules: run_due failed")
        return
    if made:
        log.info("schedules: %d run(s) created", made)
