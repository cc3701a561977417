"""Recurring collections: each schedule creates exactly one run per (dataset, window).

This module checks a schedule's settings and holds the engine calls of `manage.py schedule`
and the Schedules page (add, create, change, pause, remove, describe, overview), one set of
rules for both. When a schedule is due and which window it names: recovery.intake.recurrence.
How the dispatcher makes each due window's run exactly once: recovery.intake.schedule_runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db import transaction
from django.utils import timezone

from recovery import audit, keys
from recovery.delivery.outbox import public_text
from recovery.intake import manifest_credentials as credentials
from recovery.intake import manifest_parsing
from recovery.intake import recurrence as recurrences
from recovery.intake.recurrence import (
    WEEKDAYS,
    Recurrence,
    ScheduleError,
    next_due,
    overdue,
    parse_recurrence,
    window_for,
)
from recovery.intake.schedule_runs import PREVIOUS, SITEMAP_PREFIX, move_place
from recovery.models import Dataset, Schedule

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
# --- checking input -----------------------------------------------------------------------


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
        manifest_parsing.check_window(sample)
    except manifest_parsing.ManifestError:
        raise ScheduleError(
            "window_format", f"{fmt!r} makes {sample!r}: windows use A-Z a-z 0-9 . _ : -"
        ) from None
    return fmt


def check_window_names(recurrence: Recurrence, tz: str, fmt: str, now: datetime) -> None:
    """Every window the schedule would name over the horizon recurrence.checked_windows looks
    at is a valid window name and names one due instant only; a refusal names the first bad
    name or the first repeat (two instants that would make one run, the later one never)."""
    probe = Schedule(
        kind=recurrence.kind,
        at_time=recurrence.at_time,
        weekday=recurrence.weekday,
        cron=recurrence.cron,
        time_zone=tz,
        window_format=fmt,
    )
    zone = ZoneInfo(tz)
    named: dict[str, datetime] = {}
    for instant, window in recurrences.checked_windows(probe, now):
        if window in named:
            raise ScheduleError(
                "window_format", _repeats(fmt, named[window], instant, window, zone)
            )
        named[window] = instant
        try:
            manifest_parsing.check_window(window)
        except manifest_parsing.ManifestError:
            raise ScheduleError(
                "window_format",
                f"{fmt!r} makes {window!r} for {recurrences.local_label(instant, zone, True)}: "
                "windows use 1 to 64 of A-Z a-z 0-9 . _ : -",
            ) from None


def _repeats(fmt: str, first: datetime, second: datetime, window: str, zone: ZoneInfo) -> str:
    # The fall-back hour: two instants at one local time; their zone abbreviations tell them apart.
    alike = recurrences.local_label(first, zone) == recurrences.local_label(second, zone)
    labels = [recurrences.local_label(i, zone, with_zone=alike) for i in (first, second)]
    hint = " (add %Z, the zone's abbreviation, or name windows in UTC: --tz UTC)" if alike else ""
    return f"window format {fmt!r} repeats: {labels[0]} and {labels[1]} are both {window!r}{hint}"


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
        if "${" in url or credentials.problem(url):
            raise ScheduleError(
                "manifest",
                f"{public_text(source)}: a sitemap source takes no credential "
                "(the URLs of its pages are stored as tasks)",
            )
        try:
            return SITEMAP_PREFIX + keys.canonical_url(url)
        except keys.InvalidURL as exc:
            raise ScheduleError("manifest", f"{source!r}: {exc}") from None
    scheme = urlsplit(source).scheme.lower()
    if scheme in ("http", "https"):
        return _without_credentials(source)
    if scheme and len(scheme) > 1:
        raise ScheduleError(
            "manifest", f"{source!r}: a file path, an http(s) URL, sitemap:<URL> or 'previous'"
        )
    if within is not None and not Path(source).resolve().is_relative_to(within.resolve()):
        raise ScheduleError("manifest", f"{source!r}: a file must be under {within}")
    if not Path(source).is_file():
        raise ScheduleError("manifest", f"{source!r}: no such file")
    return str(Path(source).resolve())


def _without_credentials(source: str) -> str:
    """An http(s) source whose credentials are ${SALVAGE_MANIFEST_...} placeholders (stored as
    written, filled in at each fetch: recovery.intake.manifest_credentials)."""
    why = credentials.problem(source)
    if why:
        raise ScheduleError("manifest", f"{public_text(source)}: {why}")
    return source


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
    now: datetime | None = None,
) -> Settings:
    """Every setting checked, for the command and the Schedules form alike (one set of rules);
    raises ScheduleErrors naming every field at fault. The recurrence comes parsed or as the
    command's --daily/--weekly/--cron values. The windows are checked from `now` (default: the
    current time) on: each names one due instant (check_window_names)."""
    errors: list[ScheduleError] = []

    def checked(check, *args):
        try:
            return check(*args)
        except ScheduleError as exc:
            errors.append(exc)
            return None

    if recurrence is None:
        recurrence = checked(lambda: parse_recurrence(daily=daily, weekly=weekly, cron=cron))
    zone = checked(check_zone, tz)
    fmt = checked(check_window_format, window_format)
    if recurrence is not None and zone is not None and fmt is not None:
        checked(check_window_names, recurrence, tz, fmt, now or timezone.now())
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
        now = timezone.now()
        schedule = Schedule.objects.create(
            dataset=dataset,
            name=name,
            paused=paused,
            paused_at=now if paused else None,
            created_at=now,
            updated_at=now,
            **settings.fields(),
        )
        audit.record(actor, "schedule_added", schedule, **audited(describe(schedule)))
    return schedule


def change(
    dataset_name: str, name: str, settings: Settings, *, paused: bool, actor: str
) -> dict[str, list[str]]:
    """New settings for a schedule; returns what changed ({setting: [before, after]}, empty
    when nothing did), which the audit entry records. The schedule keeps its place: its last
    window is not made again, and instants of the new recurrence between its last due instant
    and now follow the catch-up policy. A pending retry is dropped, so the next dispatcher
    check tries the new settings at once (an edit is how a broken manifest source is fixed).
    Pausing or resuming here is `set_paused`'s: windows due while paused are skipped."""
    with transaction.atomic():
        schedule = find(dataset_name, name)
        was_paused = schedule.paused
        before = {**describe(schedule), "state": _state(schedule.paused)}
        values = settings.fields()
        for key, value in values.items():
            setattr(schedule, key, value)
        after = {**describe(schedule), "state": _state(paused)}
        changed = {key: [before[key], after[key]] for key in after if before[key] != after[key]}
        if changed:
            now = timezone.now()
            marks = _pause_marks(paused, now) if paused != was_paused else {}
            Schedule.objects.filter(pk=schedule.pk).update(
                **values, **marks, paused=paused, retry_at=None, updated_at=now
            )
            skipped = _pass_pause(schedule.pk, now) if was_paused and not paused else {}
            audit.record(
                actor, "schedule_changed", schedule, changed=audited_change(changed), **skipped
            )
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
    """Pause or resume; False when it already was. Windows that fall due while a schedule is
    paused are skipped: no run is made for them, on resume or later, whatever the catch-up
    policy (recovery.intake.recurrence.paused_over); the resume's audit entry counts them."""
    with transaction.atomic():
        schedule = find(dataset_name, name)
        now = timezone.now()
        changed = Schedule.objects.filter(pk=schedule.pk, paused=not paused).update(
            paused=paused, updated_at=now, **_pause_marks(paused, now)
        )
        if changed:
            action = "schedule_paused" if paused else "schedule_resumed"
            skipped = {} if paused else _pass_pause(schedule.pk, now)
            audit.record(actor, action, schedule, reason, **skipped)
    return bool(changed)


def _pause_marks(paused: bool, now: datetime) -> dict[str, object]:
    """Pausing starts a new pause; resuming ends it (what recurrence.paused_over reads)."""
    return {"paused_at": now, "resumed_at": None} if paused else {"resumed_at": now}


def _pass_pause(schedule_pk: int, now: datetime) -> dict[str, Any]:
    """After a resume: the schedule's place moves past the windows the pause skipped (so what
    reads the place, overdue() included, sees nothing due); returns what the audit records."""
    schedule = Schedule.objects.get(pk=schedule_pk)
    to = recurrences.place_after_pause(schedule, now)
    if to is not None:
        move_place(schedule, to)
    skipped = recurrences.skipped_by_pause(schedule)
    if not skipped:
        return {"skipped": 0}
    return {"skipped": len(skipped), "skipped_windows": [skipped[0][1], skipped[-1][1]]}


def skipped_line(schedule: Schedule) -> str:
    """What the last pause skipped, in words (the command line's resume, the audit page)."""
    skipped = recurrences.skipped_by_pause(schedule)
    if not skipped:
        return "no window fell due while it was paused"
    span = skipped[0][1] if len(skipped) == 1 else f"{skipped[0][1]} to {skipped[-1][1]}"
    n = len(skipped)
    return f"{n} window{'s' if n != 1 else ''} due while it was paused skipped ({span})"


def remove(dataset_name: str, name: str, *, actor: str, reason: str = "") -> None:
    """Delete the schedule (its runs stay)."""
    with transaction.atomic():
        schedule = find(dataset_name, name)
        audit.record(actor, "schedule_removed", schedule, reason, **audited(describe(schedule)))
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


def audited(described: dict[str, str]) -> dict[str, str]:
    """What the audit log keeps of a schedule: its manifest source without a credential (a URL
    may carry a user, password or token; the audit log is read on a page and exported)."""
    return {**described, "manifest": public_text(described["manifest"])}


def audited_change(changed: dict[str, list[str]]) -> dict[str, list[str]]:
    if "manifest" not in changed:
        return changed
    before, after = (public_text(value) for value in changed["manifest"])
    if before == after:  # only what is not shown changed: say so, without it
        after += " (its credentials or query changed)"
    return {**changed, "manifest": [before, after]}


def overview(rows, now: datetime) -> list[dict]:
    """What the Schedules page and the dataset page show for each schedule. `overdue`:
    (instant, window) of its oldest window due without a run (recurrence.overdue), or None."""
    out = []
    for s in rows:
        upcoming = None if s.paused else next_due(s, now)
        out.append(
            {
                "schedule": s,
                "describe": describe(s),
                "next_window": window_for(s, upcoming) if upcoming else None,
                "next_at": upcoming,
                "overdue": overdue(s, now),
                # What a page shows of the manifest and the error: never a credential.
                "manifest": public_text(s.manifest_source),
                "last_error": public_text(s.last_error),
            }
        )
    return out
