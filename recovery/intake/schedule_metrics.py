"""The schedules' series of `/metrics`, one per schedule (at most SCHEDULE_CAP of them):

- `salvage_schedule_next_window_timestamp_seconds{schedule}`: when its next window is due, as
  the Schedules page shows it (`schedules.overview`); none while it is paused;
- `salvage_schedule_error{schedule}`: 1 while its last attempt to make a run failed (a manifest
  that could not be read or fetched: `last_error` is set, and cleared by the next run it makes);
- `salvage_schedule_overdue_seconds{schedule}`: how long ago its oldest window fell due that has
  no run yet, once that is longer than `recurrence.overdue_grace()` (the Schedules page's
  "overdue", `schedules.overview`), else 0; none while it is paused. It grows while no
  dispatcher makes the window (none alive, or one that cannot keep up).

The label is `<dataset>/<schedule name>`, the names an operator gave; never the manifest source
(it may be a URL).
"""

from __future__ import annotations

from datetime import datetime

from recovery.intake import schedules
from recovery.models import Schedule
from recovery.ops.metrics import Exposition

# Schedules are made by hand, a few per dataset: this only bounds a mistake.
SCHEDULE_CAP = 1000


def write(out: Exposition, now: datetime) -> None:
    rows = Schedule.objects.select_related("dataset").order_by("pk")[:SCHEDULE_CAP]
    shown = schedules.overview(rows, now)
    names = {item["schedule"].pk: str(item["schedule"]) for item in shown}
    out.metric(
        "salvage_schedule_next_window_timestamp_seconds",
        "gauge",
        "Unix time at which the schedule's next window is due (absent while it is paused).",
        (
            ({"schedule": names[item["schedule"].pk]}, item["next_at"].timestamp())
            for item in shown
            if item["next_at"] is not None
        ),
    )
    out.metric(
        "salvage_schedule_error",
        "gauge",
        "1 when the schedule's last attempt to make a run failed (see the Schedules page), else 0.",
        (
            ({"schedule": names[item["schedule"].pk]}, 1 if item["schedule"].last_error else 0)
            for item in shown
        ),
    )
    out.metric(
        "salvage_schedule_overdue_seconds",
        "gauge",
        "Seconds since the schedule's oldest window without its run fell due, once past the grace "
        "of two schedule checks; 0 when not overdue (absent while it is paused).",
        (
            ({"schedule": names[item["schedule"].pk]}, _overdue_seconds(item, now))
            for item in shown
            if not item["schedule"].paused
        ),
    )


def _overdue_seconds(item: dict, now: datetime) -> float:
    late = item["overdue"]  # (instant, window) or None: recurrence.overdue, as the page shows it
    return 0 if late is None else (now - late[0]).total_seconds()
