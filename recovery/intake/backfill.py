"""Backfill: a schedule's windows over an explicit past range, each made once.

`plan` lists the windows whose due instants lie in the range (`--from` to `--to`, cut at now: a
window not yet due is the dispatcher's), each with the run it has already, if any; the page
shows that list for confirmation and the command line prints it with `--dry-run`. `backfill`
makes the missing ones the dispatcher's way (recovery.intake.schedule_runs): the schedule's
manifest materialised outside any transaction, then the run; the run's unique (dataset, window)
is the fence, so a window whose run exists, or appears meanwhile (the dispatcher, a
`createrun`), is adopted, never duplicated. It stops at the first window whose manifest fails
(run it again: what was made is adopted), and writes one audit entry, `schedule_backfilled`,
with the range and the windows made, adopted and failed.

A backfill makes every window of the range, those a pause skipped included (it is asked for by
name), and leaves the schedule's own place alone: the dispatcher neither makes these windows
again nor counts them as its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

from django.utils import timezone

from recovery import audit
from recovery.intake import manifests, schedule_runs, schedules
from recovery.intake.recurrence import ScheduleError, local_label, occurrences, window_for
from recovery.models import Run, Schedule

MAX_WINDOWS = 100  # per backfill: a longer range is backfilled in parts
_TINY = timedelta(microseconds=1)


@dataclass(frozen=True)
class Window:
    instant: datetime
    window: str
    run_id: int | None  # the run the window has already (adopted); None: to make


@dataclass(frozen=True)
class Plan:
    schedule: Schedule
    start: datetime  # the range, start included, stop excluded, stop at most now
    stop: datetime
    windows: tuple[Window, ...]

    @property
    def names(self) -> list[str]:
        return [w.window for w in self.windows]

    @property
    def to_make(self) -> list[Window]:
        return [w for w in self.windows if w.run_id is None]

    def label(self, instant: datetime) -> str:
        return local_label(instant, ZoneInfo(self.schedule.time_zone), with_zone=True)


@dataclass
class Result:
    plan: Plan
    made: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    failed: tuple[str, str] | None = None  # (window, why): the backfill stopped there

    def line(self) -> str:
        """One line for the command line and the page's message."""
        parts = [f"{_count(len(self.made), 'run')} made" + _listed(self.made)]
        parts.append(f"{len(self.adopted)} adopted" + _listed(self.adopted))
        text = f"backfill of {self.plan.schedule}: " + ", ".join(parts)
        if self.failed:
            window, why = self.failed
            text += f"; stopped at window {window}: {why} (run it again to go on)"
        return text


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _listed(windows: list[str]) -> str:
    return f" ({', '.join(windows)})" if windows else ""


def parse_bound(value: str, zone: ZoneInfo, name: str, *, end: bool) -> datetime:
    """A range bound: a date (YYYY-MM-DD: from its local midnight; as `--to`, the whole day) or
    a date and time (YYYY-MM-DDTHH:MM, in the schedule's zone unless it has an offset; as
    `--to`, included). Returns the bound as an instant (`--to`: the first instant after)."""
    text = value.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            local = datetime.combine(day + timedelta(days=1 if end else 0), datetime.min.time())
            return local.replace(tzinfo=zone)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(
            name, f"{value!r}: use a date (2026-11-01) or a date and time (2026-11-01T06:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment + _TINY if end else moment


def plan(dataset_name: str, name: str, start: str, stop: str, now: datetime | None = None) -> Plan:
    """The windows a backfill of the range would make or adopt; refuses a range that starts
    in the future, ends before it starts, holds no window or more than MAX_WINDOWS."""
    now = now or timezone.now()
    schedule = schedules.find(dataset_name, name)
    zone = ZoneInfo(schedule.time_zone)
    begin = parse_bound(start, zone, "from", end=False)
    end = parse_bound(stop, zone, "to", end=True)
    if end <= begin:
        raise ScheduleError("to", f"{stop!r} is not after --from {start!r}")
    if begin > now:
        raise ScheduleError(
            "from",
            f"{start!r} is in the future: a backfill makes windows already due "
            "(the dispatcher makes the rest)",
        )
    end = min(end, now + _TINY)  # a window due after now is the dispatcher's
    instants = list(islice(occurrences(schedule, begin - _TINY, end - _TINY), MAX_WINDOWS + 1))
    if len(instants) > MAX_WINDOWS:
        raise ScheduleError(
            "to", f"the range holds more than {MAX_WINDOWS} windows: backfill it in parts"
        )
    named: dict[str, datetime] = {}
    for instant in instants:
        named.setdefault(window_for(schedule, instant), instant)
    if not named:
        when = schedules.describe(schedule)["recurrence"]
        raise ScheduleError("from", f"no window of {when} falls due from {start} to {stop}")
    runs = dict(
        Run.objects.filter(dataset_id=schedule.dataset_id, window__in=list(named)).values_list(
            "window", "pk"
        )
    )
    windows = tuple(Window(at, window, runs.get(window)) for window, at in named.items())
    return Plan(schedule, begin, end, windows)


def backfill(
    dataset_name: str,
    name: str,
    start: str,
    stop: str,
    *,
    actor: str,
    reason: str = "",
    expected: Sequence[str] | None = None,
    now: datetime | None = None,
) -> Result:
    """Make the range's missing windows, oldest first. `expected`: the windows the person
    confirmed; when the range now names others, nothing is made."""
    planned = plan(dataset_name, name, start, stop, now)
    if expected is not None and list(expected) != planned.names:
        raise ScheduleError(
            "windows",
            "the range's windows are not the ones you confirmed (the schedule changed "
            "meanwhile); nothing was made, review it again",
        )
    result = Result(planned)
    for w in planned.windows:
        if w.run_id is not None:
            result.adopted.append(w.window)
            continue
        try:
            made = _make(planned.schedule, w.window, actor)
        except (manifests.ManifestError, ScheduleError, OSError) as exc:
            result.failed = (w.window, str(exc))
            break
        (result.made if made else result.adopted).append(w.window)
    audit.record(
        actor,
        "schedule_backfilled",
        planned.schedule,
        reason,
        start=planned.start.isoformat(),
        stop=planned.stop.isoformat(),
        made=result.made,
        adopted=result.adopted,
        failed=list(result.failed) if result.failed else None,
    )
    return result


def _make(schedule: Schedule, window: str, actor: str) -> bool:
    """True when the window's run was made here, False when it existed (adopted)."""
    try:
        with schedule_runs.materialised(schedule) as (path, source):
            manifests.create_run(
                schedule.dataset.name,
                window,
                path,
                name=source,
                actor=actor,
                sitemap_url=schedule_runs.sitemap_source(schedule),
            )
    except manifests.ManifestError:
        # The run appeared after the plan was read (the dispatcher, a createrun): adopted.
        if Run.objects.filter(dataset_id=schedule.dataset_id, window=window).exists():
            return False
        raise
    return True
