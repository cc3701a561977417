"""When a schedule is due, which window each due instant names, and when it is late.

Due instants. A recurrence gives local wall-clock times in the schedule's zone (`daily` HH:MM,
`weekly` weekday HH:MM, or a 5-field `cron` expression read by croniter), and one rule maps a
local time to the instants it is due at, for every kind alike (`instants_at`):
- a local time that happens once is due then;
- a local time the spring-forward gap skips is due at the first instant after the gap (01:30
  in London on 29 March 2026 at 02:00 BST; 02:30 in New York on 8 March 2026 at 03:00 EDT);
  several skipped times (`*/15` through the gap) are that one instant;
- a local time the fall-back hour repeats is due once, at its first pass (01:30 BST, not
  01:30 GMT again), unless the cron runs every hour (its hour field is `*`): then it is due in
  both passes, as elapsed time would have it (`0 * * * *`: 01:00 BST and 01:00 GMT).

Windows. The window is the due instant's local time formatted with `window_format`, and no two
due instants may name the same window: `repeat` finds the first two that would, over the next
CHECKED_INSTANTS instants, the first instant of each of the next CHECKED_DAYS days and the hours
around each clock change in them, and a schedule is saved only when there is none.

Missed instants (the dispatcher was down) follow `catch_up`: `latest` makes the newest missed
window only; `each` makes each, oldest first, at most `catch_up_max` (`due`). Instants that fell
due while the schedule was paused are skipped, never made (`paused_over`). A window due longer
than `overdue_grace()` ago without its run makes the schedule overdue (`overdue`).
Reads the schedule's fields only; writes nothing.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from itertools import islice
from zoneinfo import ZoneInfo

from croniter import croniter

from recovery.models import Schedule

MAX_OCCURRENCES = 10_000  # local times looked at per call: a cron every minute over a week
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_TIME = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$")
# More than any clock change in tzdata (2 hours): how far a later local time's instant can lie
# before an earlier one's, so instants can be put in order as local times are read.
MAX_SHIFT = timedelta(hours=3)
CHECKED_INSTANTS = 1000  # the next due instants whose windows must all differ
CHECKED_DAYS = 800  # and the first of each of these days: shows a yearly repeat (%m-%d, %j)
AROUND_CHANGE = timedelta(hours=12)  # and every instant this close to a clock change in them
OVERDUE_FLOOR = timedelta(minutes=1)


class ScheduleError(ValueError):
    """Bad schedule input; `field` names the option at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


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


# --- due instants ---------------------------------------------------------------------------


def instants_at(wall: datetime, zone: ZoneInfo, *, both_passes: bool = False) -> list[datetime]:
    """The UTC instants a naive local time `wall` is due at (the module's one DST rule)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return [first]
    if first < second:  # the fall-back hour: fold 0 is the first pass
        return [first, second] if both_passes else [first]
    # The spring-forward gap: fold 0 reads the time with the offset before the change (an
    # instant after it), fold 1 with the offset after (one before it); the change lies between.
    return [_change_between(second, first, zone)]


def _change_between(before: datetime, after: datetime, zone: ZoneInfo) -> datetime:
    """The instant the zone's offset changes in (before, after]; tzdata changes fall on whole
    seconds, so a search over seconds finds it exactly."""
    low, high = int(before.timestamp()), int(after.timestamp())
    new = after.astimezone(zone).utcoffset()
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, UTC).astimezone(zone).utcoffset() == new:
            high = mid
        else:
            low = mid
    return datetime.fromtimestamp(high, UTC)


def _local_times(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """The recurrence's naive local times after `after` (naive local), in order."""
    if schedule.kind == Schedule.Kind.CRON:
        it = croniter(schedule.cron, after)
        while True:
            yield it.get_next(datetime)
    day: date = after.date()
    while True:
        if schedule.kind == Schedule.Kind.DAILY or day.isoweekday() == schedule.weekday:
            wall = datetime.combine(day, schedule.at_time)
            if wall > after:
                yield wall
        day += timedelta(days=1)


def every_hour(schedule: Schedule) -> bool:
    """A cron whose hour field is `*`: due in both passes of a repeated hour."""
    return schedule.kind == Schedule.Kind.CRON and croniter(schedule.cron).expanded[1] == ["*"]


def occurrences(schedule: Schedule, after: datetime, until: datetime) -> Iterator[datetime]:
    """Due instants in (after, until], oldest first, as aware UTC datetimes."""
    zone = ZoneInfo(schedule.time_zone)
    both = every_hour(schedule)
    start = (after - MAX_SHIFT).astimezone(zone).replace(tzinfo=None)
    ahead: list[datetime] = []  # a heap: instants read but not yet given, in time order
    last = None

    def ready(bound: datetime | None) -> Iterator[datetime]:
        nonlocal last
        while ahead and (bound is None or ahead[0] <= bound):
            instant = heapq.heappop(ahead)
            if after < instant <= until and instant != last:
                last = instant
                yield instant

    for wall in islice(_local_times(schedule, start), MAX_OCCURRENCES):
        instants = instants_at(wall, zone, both_passes=both)
        for instant in instants:
            heapq.heappush(ahead, instant)
        # No later local time is due before this one's instant less MAX_SHIFT.
        bound = instants[0] - MAX_SHIFT
        yield from ready(bound)
        if bound > until:
            return
    yield from ready(None)


def window_for(schedule: Schedule, instant: datetime) -> str:
    return instant.astimezone(ZoneInfo(schedule.time_zone)).strftime(schedule.window_format)


def next_due(schedule: Schedule, now: datetime) -> datetime | None:
    """The next instant after now (what the Schedules list shows)."""
    horizon = now + timedelta(days=400)
    return next(occurrences(schedule, max(now, schedule.last_due_at or now), horizon), None)


# --- what is due, skipped, late -------------------------------------------------------------


def paused_over(schedule: Schedule, instant: datetime) -> bool:
    """Did `instant` fall due while the schedule was paused (its last pause, paused_at to
    resumed_at, or since paused_at while it is paused)? Such a window is skipped, never made."""
    if schedule.paused:
        return schedule.paused_at is None or instant > schedule.paused_at
    if schedule.paused_at is None or schedule.resumed_at is None:
        return False
    return schedule.paused_at < instant <= schedule.resumed_at


def place(schedule: Schedule) -> datetime:
    """Where the schedule's scan for due instants starts (exclusive)."""
    return schedule.last_due_at or schedule.created_at


@dataclass(frozen=True)
class Scan:
    """What lies between a schedule's place and a moment."""

    # (instant, window) of every window due with no run made for it yet, oldest first, before
    # the catch-up policy: due after the place, not skipped by a pause, not the last window.
    pending: list[tuple[datetime, str]]
    # A due instant that names the last window made again: a window format saved before
    # `repeat` was checked (e.g. '%H'); the dispatcher reports it, never silently.
    repeat: datetime | None = None


def scan(schedule: Schedule, until: datetime) -> Scan:
    """The due instants in (place, until], sorted into pending windows and a repeat."""
    by_window: dict[str, datetime] = {}
    again = None
    for instant in occurrences(schedule, place(schedule), until):
        if paused_over(schedule, instant):
            continue
        window = window_for(schedule, instant)
        if window != schedule.last_window:
            by_window.pop(window, None)
            by_window[window] = instant  # the latest instant naming a window stands for it
        elif again is None and _own_instant(schedule, schedule.last_due_at):
            again = instant
    return Scan([(instant, window) for window, instant in by_window.items()], again)


def _own_instant(schedule: Schedule, instant: datetime | None) -> bool:
    """Is `instant` a due instant of the schedule's recurrence? An edit can leave the place on
    an instant of the previous recurrence, whose window the new one may name again: that window
    is not made again, by design, and is no repeat."""
    if instant is None:
        return False
    return (
        next(occurrences(schedule, instant - timedelta(microseconds=1), instant), None) == instant
    )


def pending(schedule: Schedule, until: datetime) -> list[tuple[datetime, str]]:
    return scan(schedule, until).pending


def catch_up(schedule: Schedule, windows: list[tuple[datetime, str]]) -> list[tuple[datetime, str]]:
    """The pending windows the catch-up policy makes now: the newest, or the oldest N."""
    keep = 1 if schedule.catch_up == Schedule.CatchUp.LATEST else schedule.catch_up_max
    return windows[-keep:]


def due(schedule: Schedule, now: datetime) -> list[tuple[datetime, str]]:
    """(instant, window) to create now, oldest first, after the catch-up policy."""
    return catch_up(schedule, pending(schedule, now))


def overdue_grace() -> timedelta:
    """How long a window may be due without its run: two of the dispatcher's schedule checks
    (SALVAGE_SCHEDULE_CHECK_SECONDS), and at least a minute."""
    from django.conf import settings

    return max(OVERDUE_FLOOR, timedelta(seconds=2 * settings.SALVAGE_SCHEDULE_CHECK_SECONDS))


def overdue(
    schedule: Schedule, now: datetime, grace: timedelta | None = None
) -> tuple[datetime, str] | None:
    """(instant, window) of the oldest window due more than `grace` (default `overdue_grace()`)
    before `now` whose run was not made, or None: the one definition of an overdue schedule
    (the Schedules page, `schedule list`, metrics and the attention view call it). A paused
    schedule is never overdue; a skipped window never makes one overdue."""
    if schedule.paused:
        return None
    late = pending(schedule, now - (overdue_grace() if grace is None else grace))
    return late[0] if late else None


def skipped_by_pause(schedule: Schedule, limit: int = 1000) -> list[tuple[datetime, str]]:
    """(instant, window) of the windows the schedule's last pause skipped (at most `limit`)."""
    if schedule.paused or schedule.paused_at is None or schedule.resumed_at is None:
        return []
    found = occurrences(schedule, schedule.paused_at, schedule.resumed_at)
    return [(instant, window_for(schedule, instant)) for instant in islice(found, limit)]


def place_after_pause(schedule: Schedule, now: datetime) -> datetime | None:
    """Where the schedule's place moves once its last pause is over: to the resume (or now, if
    sooner), past the windows the pause skipped; None when the place is there already, or a
    window due before the pause is still to be made first (the dispatcher makes it, then the
    place moves on)."""
    if schedule.paused or schedule.paused_at is None or schedule.resumed_at is None:
        return None
    start, end = place(schedule), min(now, schedule.resumed_at)
    if start >= end:
        return None
    for instant in occurrences(schedule, start, end):
        if not paused_over(schedule, instant) and (
            window_for(schedule, instant) != schedule.last_window
        ):
            return None
    return end


# --- windows that must not repeat -----------------------------------------------------------


@dataclass(frozen=True)
class Repeat:
    """Two due instants whose windows are the same name."""

    first: datetime
    second: datetime
    window: str


def checked_windows(schedule: Schedule, now: datetime) -> list[tuple[datetime, str]]:
    """(instant, window), oldest first, of the due instants whose windows must all differ: the
    next CHECKED_INSTANTS instants after `now`, the first instant of each of the next
    CHECKED_DAYS days, and every instant within AROUND_CHANGE of each clock change in them."""
    zone = ZoneInfo(schedule.time_zone)
    end = now + timedelta(days=CHECKED_DAYS)
    far = now + timedelta(days=366 * 100)  # sparse crons: their next instants, however far
    instants = set(islice(occurrences(schedule, now, far), CHECKED_INSTANTS))
    instants.update(_first_of_each_day(schedule, zone, now, CHECKED_DAYS))
    for change in clock_changes(zone, now, end):
        instants.update(occurrences(schedule, change - AROUND_CHANGE, change + AROUND_CHANGE))
    return [(instant, window_for(schedule, instant)) for instant in sorted(instants)]


def repeat(schedule: Schedule, now: datetime) -> Repeat | None:
    """The first two of `checked_windows` that name one window; None when every name differs."""
    named: dict[str, datetime] = {}
    for instant, window in checked_windows(schedule, now):
        if window in named:
            return Repeat(named[window], instant, window)
        named[window] = instant
    return None


def _first_of_each_day(
    schedule: Schedule, zone: ZoneInfo, now: datetime, days: int
) -> Iterator[datetime]:
    """The first due instant after each of the next `days` local midnights (one croniter moved
    day by day: building one per day costs ten times more)."""
    both = every_hour(schedule)
    midnight = datetime.combine(now.astimezone(zone).date(), clock_time())
    times = croniter(schedule.cron, midnight) if schedule.kind == Schedule.Kind.CRON else None
    for k in range(1, days + 1):
        start = midnight + timedelta(days=k) - timedelta(microseconds=1)
        if times is not None:
            times.set_current(start, force=True)
            wall = times.get_next(datetime)
        else:
            wall = next(_local_times(schedule, start))
        yield instants_at(wall, zone, both_passes=both)[0]


def clock_changes(zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """The instants in (start, end] at which the zone's UTC offset changes (found day by day,
    then to the second)."""
    changes = []
    day, offset = start, start.astimezone(zone).utcoffset()
    while day < end:
        following = min(day + timedelta(days=1), end)
        new = following.astimezone(zone).utcoffset()
        if new != offset:
            changes.append(_change_between(day, following, zone))
            offset = new
        day = following
    return changes


def local_label(instant: datetime, zone: ZoneInfo, with_zone: bool = False) -> str:
    """An instant as its local date and time ('2026-12-03 06:00'), with the zone's abbreviation
    when two instants would read alike ('2026-10-25 01:00 BST')."""
    return instant.astimezone(zone).strftime("%Y-%m-%d %H:%M" + (" %Z" if with_zone else ""))
