"""Pausing or resuming many schedules at once (the Schedules list's bulk action).

Each selected schedule goes through `schedules.set_paused`, the command line's and the single
button's own call, so its row and its audit entry are exactly those of toggling it alone. A
schedule already in the wanted state is left alone (the single call's "no change"), and is
not counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from recovery.intake import schedules
from recovery.models import Schedule

ScheduleError = schedules.ScheduleError

MAX_SCHEDULES = 200


def _ids(schedule_ids: Sequence[int | str]) -> list[int]:
    try:
        ids = sorted({int(pk) for pk in schedule_ids})
    except (TypeError, ValueError):
        raise ScheduleError("selection", "it holds something that is not a schedule") from None
    if not ids:
        raise ScheduleError("selection", "select at least one schedule")
    if len(ids) > MAX_SCHEDULES:
        raise ScheduleError("selection", f"select at most {MAX_SCHEDULES} schedules at once")
    return ids


def to_change(schedule_ids: Sequence[int | str], paused: bool) -> list[Schedule]:
    """The selected schedules that pausing (or resuming) would change, by dataset and name."""
    return list(
        Schedule.objects.select_related("dataset")
        .filter(pk__in=_ids(schedule_ids), paused=not paused)
        .order_by("dataset__name", "name")
    )


def set_paused_many(
    schedule_ids: Sequence[int | str],
    paused: bool,
    *,
    actor: str,
    reason: str = "",
    expected: int,
) -> int:
    """Pause (or resume) the selected schedules, all or none; returns how many changed.

    `expected` is the count the operator confirmed: when the selection now holds a different
    number of schedules to change (one was toggled meanwhile), nothing changes.
    """
    with transaction.atomic():
        changing = to_change(schedule_ids, paused)
        if len(changing) != expected:
            raise ScheduleError(
                "selection",
                f"{len(changing)} of the selected schedules would change now, not the "
                f"{expected} you confirmed; nothing was changed, review it again",
            )
        if not changing:
            raise ScheduleError("selection", "none of the selected schedules would change")
        for schedule in changing:
            if not schedules.set_paused(
                schedule.dataset.name, schedule.name, paused, actor=actor, reason=reason
            ):
                raise ScheduleError("selection", f"schedule {schedule} changed meanwhile")
    return len(changing)
