"""Recurring collections: each schedule creates exactly one run per (dataset, window).

A schedule's recurrence gives due instants: `daily` at a local time in a named time zone,
`weekly` on an ISO weekday at a local time, or a 5-field `cron` expression (croniter), always
evaluated in the schedule's zone, so 06:00 Europe/London stays 06:00 local across the clock
changes (a local time that does not exist on the spring-forward day runs at the instant the
zone's offset before the change gives it; on the fall-back day the first 01:30 is used). The
window is the due instant's local time formatted with `window_format` (`%Y-%m-%d`,
`%G-W%V`, ...), so two instants that name the same window make one run.

`run_due(now)` (the dispatcher calls it after each tick, recovery.dispatch) creates what is
due. Exactly once, whatever happens:
- the manifest is materialised first, outside any transaction (a file path; an http(s) URL
  fetched through the guarded client; or "previous": the previous window's manifest plus what
  its run discovered); a failure is recorded on the schedule (`last_error`, `failures`) and
  retried after a backoff, and no run is made. A `sitemap:<http(s) URL>` source needs no
  manifest: the run starts with that sitemap file as its one task (recovery.sitemaps), and the
  workers read it through the guarded client like any page;
- then one transaction moves the schedule from the `last_due_at` it read to the new instant
  (a guarded UPDATE: a second dispatcher that read the same value updates nothing and stops)
  and creates the run; the run's unique (dataset, window) is the fence, so a run that exists
  already (a crash after commit, a manual `createrun`) is adopted, never duplicated. A crash
  before the commit leaves both unchanged, and the next call does the same work again.
Missed instants (the dispatcher was down, the clock jumped) follow `catch_up`: `latest` makes
the newest missed window only; `each` makes each missed window, oldest first, at most
`catch_up_max` of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from recovery import audit, failures, keys, manifests, sitemaps
from recovery.models import Dataset, Run, Schedule, Task

log = logging.getLogger(__name__)

PREVIOUS = "previous"
SITEMAP_PREFIX = "sitemap:"
MAX_OCCURRENCES = 10_000  # instants looked at per call: a cron every minute over a week
RETRY_BASE = 60.0  # seconds: a failed manifest fetch is retried after backoff(failures)
RETRY_CAP = 3600.0
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_TIME = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_last_check = {"at": -1e9}


class ScheduleError(ValueError):
    """Bad schedule input; `field` names the option at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


# --- checking input -----------------------------------------------------------------------


@dataclass(frozen=True)
class Recurrence:
    kind: str
    at_time: clock_time | None = None
    weekday: int | None = None  # ISO 1-7
    cron: str = ""


def parse_time(value: str, field: str) -> clock_time:
    match = _TIME.match(value.strip())
    if not match:
        raise ScheduleError(field, f"{value!r} is not a 24-hour HH:MM time")
    return clock_time(int(match.group(1)), int(match.group(2)))


def parse_recurrence(
    *, daily: str | None = None, weekly: str | None = None, cron: str | None = None
) -> Recurrence:
    # None is "not given": an empty --daily (or the form's empty time) is a bad time, not a
    # missing recurrence.
    given = [k for k, v in (("daily", daily), ("weekly", weekly), ("cron", cron)) if v is not None]
    if len(given) != 1:
        raise ScheduleError("recurrence", "give exactly one of --daily, --weekly or --cron")
    if daily is not None:
        return Recurrence(Schedule.Kind.DAILY, at_time=parse_time(daily, "daily"))
    if weekly is not None:
        day, _, at = weekly.strip().partition(" ")
        if day.lower()[:3] not in WEEKDAYS or not at:
            raise ScheduleError("weekly", f"{weekly!r}: use '<weekday> HH:MM', e.g. 'mon 06:00'")
        return Recurrence(
            Schedule.Kind.WEEKLY,
            at_time=parse_time(at, "weekly"),
            weekday=WEEKDAYS.index(day.lower()[:3]) + 1,
        )
    expression = (cron or "").strip()
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise ScheduleError("cron", f"{cron!r} is not a 5-field cron expression")
    return Recurrence(Schedule.Kind.CRON, cron=expression)


def check_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError("tz", f"{name!r} is not an IANA time zone name") from None


def check_window_format(fmt: str) -> str:
    sample = datetime(2026, 12, 31, 23, 59, tzinfo=UTC).strftime(fmt)
    if "%" not in fmt or sample == fmt:
        raise ScheduleError("window_format", f"{fmt!r} has no date fields (e.g. %Y-%m-%d)")
    try:
        manifests.check_window(sample)
    except manifests.ManifestError:
        raise ScheduleError(
            "window_format", f"{fmt!r} makes {sample!r}: windows use A-Z a-z 0-9 . _ : -"
        ) from None
    return fmt


def check_source(source: str, within: Path | None = None) -> str:
    """`within`: the directory a file must be in (the Schedules form's; the command line's
    user can read the files anyway, a dashboard admin must not read any server file)."""
    source = source.strip()
    if source == PREVIOUS:
        return source
    if source.startswith(SITEMAP_PREFIX):
        url = source.removeprefix(SITEMAP_PREFIX).strip()
        if urlsplit(url).scheme.lower() not in ("http", "https"):
            raise ScheduleError("manifest", f"{source!r}: use sitemap:<http(s) URL of a sitemap>")
        try:
            return SITEMAP_PREFIX + keys.canonical_url(url)
        except keys.InvalidURL as exc:
            raise ScheduleError("manifest", f"{source!r}: {exc}") from None
    scheme = urlsplit(source).scheme.lower()
    if scheme in ("http", "https"):
        return source
    if scheme and len(scheme) > 1:
        raise ScheduleError(
            "manifest", f"{source!r}: a file path, an http(s) URL, sitemap:<URL> or 'previous'"
        )
    if within is not None and not Path(source).resolve().is_relative_to(within.resolve()):
        raise ScheduleError("manifest", f"{source!r}: a file must be under {within}")
    if not Path(source).is_file():
        raise ScheduleError("manifest", f"{source!r}: no such file")
    return str(Path(source).resolve())


def check_catch_up(value: str) -> tuple[str, int]:
    """`latest`, or `each:N` (each missed window, at most N)."""
    if value == Schedule.CatchUp.LATEST:
        return value, 1
    kind, _, n = value.partition(":")
    if kind == Schedule.CatchUp.EACH and n.isdigit() and 1 <= int(n) <= 366:
        return kind, int(n)
    raise ScheduleError("catch_up", f"{value!r}: use 'latest' or 'each:N' with N from 1 to 366")


class ScheduleErrors(ScheduleError):
    """Several bad settings at once: `errors` has one ScheduleError per field at fault."""

    def __init__(self, errors: list[ScheduleError]) -> None:
        ValueError.__init__(self, "; ".join(str(e) for e in errors))
        self.field = errors[0].field
        self.errors = errors


@dataclass(frozen=True)
class Settings:
    """A schedule's settings, each checked: what `add` and `change` write."""

    recurrence: Recurrence
    tz: str
    window_format: str
    source: str
    catch_up: str
    catch_up_max: int

    def fields(self) -> dict[str, object]:
        return {
            "kind": self.recurrence.kind,
            "at_time": self.recurrence.at_time,
            "weekday": self.recurrence.weekday,
            "cron": self.recurrence.cron,
            "time_zone": self.tz,
            "window_format": self.window_format,
            "manifest_source": self.source,
            "catch_up": self.catch_up,
            "catch_up_max": self.catch_up_max,
        }


def check_settings(
    *,
    recurrence: Recurrence | None = None,
    daily: str | None = None,
    weekly: str | None = None,
    cron: str | None = None,
    tz: str,
    window_format: str,
    source: str,
    catch_up: str,
    within: Path | None = None,
) -> Settings:
    """Every setting checked, for the command and the Schedules form alike (one set of rules);
    raises ScheduleErrors naming every field at fault. The recurrence comes parsed or as the
    command's --daily/--weekly/--cron values."""
    errors: list[ScheduleError] = []

    def checked(check, *args):
        try:
            return check(*args)
        except ScheduleError as exc:
            errors.append(exc)
            return None

    if recurrence is None:
        recurrence = checked(lambda: parse_recurrence(daily=daily, weekly=weekly, cron=cron))
    checked(check_zone, tz)
    checked(check_window_format, window_format)
    source = checked(check_source, source, within)
    policy = checked(check_catch_up, catch_up)
    if errors:
        raise ScheduleErrors(errors)
    return Settings(recurrence, tz, window_format, source, policy[0], policy[1])


# --- the commands' engine calls -----------------------------------------------------------


def add(
    dataset_name: str,
    name: str,
    *,
    recurrence: Recurrence,
    tz: str,
    window_format: str,
    source: str,
    catch_up: str,
    actor: str,
    paused: bool = False,
) -> Schedule:
    check_name(name)
    settings = check_settings(
        recurrence=recurrence,
        tz=tz,
        window_format=window_format,
        source=source,
        catch_up=catch_up,
    )
    return create(dataset_name, name, settings, paused=paused, actor=actor)


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ScheduleError("name", f"{name!r}: use 1 to 100 of A-Z a-z 0-9 _ -")
    return name


def create(
    dataset_name: str, name: str, settings: Settings, *, paused: bool = False, actor: str
) -> Schedule:
    """A new schedule from checked settings (`add` for the command, the Schedules form)."""
    check_name(name)
    dataset = Dataset.objects.filter(name=dataset_name).first()
    if dataset is None:
        raise ScheduleError("dataset", f"unknown dataset {dataset_name!r}")
    with transaction.atomic():
        if Schedule.objects.filter(dataset=dataset, name=name).exists():
            raise ScheduleError("name", f"{dataset_name} already has a schedule {name!r}")
        schedule = Schedule.objects.create(
            dataset=dataset, name=name, paused=paused, **settings.fields()
        )
        audit.record(actor, "schedule_added", schedule, **describe(schedule))
    return schedule


def change(
    dataset_name: str, name: str, settings: Settings, *, paused: bool, actor: str
) -> dict[str, list[str]]:
    """New settings for a schedule; returns what changed ({setting: [before, after]}, empty
    when nothing did), which the audit entry records. The schedule keeps its place: its last
    window is not made again, and instants of the new recurrence between its last due instant
    and now follow the catch-up policy. A pending retry is dropped, so the next dispatcher
    check tries the new settings at once (an edit is how a broken manifest source is fixed)."""
    with transaction.atomic():
        schedule = find(dataset_name, name)
        before = {**describe(schedule), "state": _state(schedule.paused)}
        values = settings.fields()
        for key, value in values.items():
            setattr(schedule, key, value)
        after = {**describe(schedule), "state": _state(paused)}
        changed = {key: [before[key], after[key]] for key in after if before[key] != after[key]}
        if changed:
            Schedule.objects.filter(pk=schedule.pk).update(
                **values, paused=paused, retry_at=None, updated_at=timezone.now()
            )
            audit.record(actor, "schedule_changed", schedule, changed=changed)
    return changed


def _state(paused: bool) -> str:
    return "paused" if paused else "active"


def find(dataset_name: str, name: str) -> Schedule:
    schedule = (
        Schedule.objects.select_related("dataset")
        .filter(dataset__name=dataset_name, name=name)
        .first()
    )
    if schedule is None:
        raise ScheduleError("name", f"no schedule {name!r} for dataset {dataset_name!r}")
    return schedule


def set_paused(dataset_name: str, name: str, paused: bool, *, actor: str, reason: str = "") -> bool:
    """Pause or resume; False when it already was. A resumed schedule does not make the
    windows it missed while paused beyond its catch-up policy."""
    with transaction.atomic():
        schedule = find(dataset_name, name)
        changed = Schedule.objects.filter(pk=schedule.pk, paused=not paused).update(
            paused=paused, updated_at=timezone.now()
        )
        if changed:
            action = "schedule_paused" if paused else "schedule_resumed"
            audit.record(actor, action, schedule, reason)
    return bool(changed)


def remove(dataset_name: str, name: str, *, actor: str, reason: str = "") -> None:
    """Delete the schedule (its runs stay)."""
    with transaction.atomic():
        schedule = find(dataset_name, name)
        audit.record(actor, "schedule_removed", schedule, reason, **describe(schedule))
        Schedule.objects.filter(pk=schedule.pk).delete()


def describe(schedule: Schedule) -> dict[str, str]:
    if schedule.kind == Schedule.Kind.CRON:
        when = f"cron {schedule.cron}"
    elif schedule.kind == Schedule.Kind.WEEKLY:
        day = WEEKDAYS[(schedule.weekday or 1) - 1]
        when = f"weekly {day} {schedule.at_time:%H:%M}"
    else:
        when = f"daily {schedule.at_time:%H:%M}"
    catch_up = schedule.catch_up
    if catch_up == Schedule.CatchUp.EACH:
        catch_up += f":{schedule.catch_up_max}"
    return {
        "recurrence": f"{when} {schedule.time_zone}",
        "window_format": schedule.window_format,
        "manifest": schedule.manifest_source,
        "catch_up": catch_up,
    }


# --- time ---------------------------------------------------------------------------------


def occurrences(schedule: Schedule, after: datetime, until: datetime) -> Iterator[datetime]:
    """Due instants in (after, until], oldest first, as aware UTC datetimes."""
    zone = ZoneInfo(schedule.time_zone)
    if schedule.kind == Schedule.Kind.CRON:
        it = croniter(schedule.cron, after.astimezone(zone))
        for _ in range(MAX_OCCURRENCES):
            instant = it.get_next(datetime).astimezone(UTC)
            if instant > until:
                return
            yield instant
        return
    day: date = after.astimezone(zone).date()
    last = until.astimezone(zone).date()
    while day <= last:
        if schedule.kind == Schedule.Kind.DAILY or day.isoweekday() == schedule.weekday:
            local = datetime.combine(day, schedule.at_time, tzinfo=zone)
            instant = local.astimezone(UTC)
            if after < instant <= until:
                yield instant
        day += timedelta(days=1)


def window_for(schedule: Schedule, instant: datetime) -> str:
    return instant.astimezone(ZoneInfo(schedule.time_zone)).strftime(schedule.window_format)


def due(schedule: Schedule, now: datetime) -> list[tuple[datetime, str]]:
    """(instant, window) to create now, oldest first, after the catch-up policy."""
    start = schedule.last_due_at or schedule.created_at
    by_window: dict[str, datetime] = {}
    for instant in occurrences(schedule, start, now):
        window = window_for(schedule, instant)
        if window != schedule.last_window:
            by_window.pop(window, None)
            by_window[window] = instant  # the latest instant naming a window stands for it
    pending = [(instant, window) for window, instant in by_window.items()]
    keep = 1 if schedule.catch_up == Schedule.CatchUp.LATEST else schedule.catch_up_max
    return pending[-keep:]


def next_due(schedule: Schedule, now: datetime) -> datetime | None:
    """The next instant after now (what the Schedules list shows)."""
    horizon = now + timedelta(days=400)
    return next(occurrences(schedule, max(now, schedule.last_due_at or now), horizon), None)


def overview(rows, now: datetime) -> list[dict]:
    """What the Schedules page and the dataset page show for each schedule."""
    out = []
    for s in rows:
        upcoming = None if s.paused else next_due(s, now)
        out.append(
            {
                "schedule": s,
                "describe": describe(s),
                "next_window": window_for(s, upcoming) if upcoming else None,
                "next_at": upcoming,
            }
        )
    return out


# --- creating runs ------------------------------------------------------------------------


def run_due(now: datetime | None = None) -> int:
    """Create the runs that are due on every active schedule; returns how many were made."""
    now = now or timezone.now()
    made = 0
    active = Schedule.objects.select_related("dataset").filter(paused=False)
    for schedule in active.filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now)):
        for instant, window in due(schedule, now):
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


def _record_failure(schedule: Schedule, message: str, now: datetime) -> None:
    wait = max(RETRY_BASE, failures.backoff(schedule.failures + 1, RETRY_BASE, RETRY_CAP))
    Schedule.objects.filter(pk=schedule.pk).update(
        failures=F("failures") + 1,
        last_error=message[:2000],
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
        body = asyncio.run(_fetch(source))
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


async def _fetch(url: str) -> str:
    from recovery.http import Fetcher, FetchError

    fetcher = Fetcher(per_host=1)
    try:
        page = await fetcher.fetch(url)
    except FetchError as exc:
        raise ScheduleError("manifest", f"{url}: {exc.detail}") from None
    finally:
        await fetcher.aclose()
    if not 200 <= page.status < 300:
        raise ScheduleError("manifest", f"{url}: HTTP {page.status}")
    try:
        return page.body.decode("utf-8")
    except UnicodeDecodeError:
        raise ScheduleError("manifest", f"{url}: the manifest is not UTF-8") from None


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
