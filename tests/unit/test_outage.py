"""OutageGuard's policy: one line each way, capped backoff, a stop that interrupts, a limit.

The steps and probes here raise what Django raises when PostgreSQL is gone; the real outages
(connections refused, backends terminated) are in tests/worker/test_database_outage.py.
"""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import OperationalError

from recovery.ops.outage import DatabaseOutage, OutageGuard


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0


class RecordingStop(threading.Event):
    """A stop event whose waits advance the fake clock instead of sleeping."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.waits: list[float] = []

    def wait(self, timeout=None) -> bool:
        self.waits.append(timeout)
        self.clock.now += timeout
        return self.is_set()


def down(message: str = "terminating connection due to administrator command"):
    raise OperationalError(message)


class Database:
    """Unreachable for the first `outage` probes, then back."""

    def __init__(self, outage: int) -> None:
        self.outage = outage
        self.probes = 0

    def probe(self) -> None:
        self.probes += 1
        if self.probes <= self.outage:
            raise OperationalError("connection refused")


def guard(database: Database, **kw) -> tuple[OutageGuard, RecordingStop]:
    clock = Clock()
    stop = RecordingStop(clock)
    options = {"limit": 600, "cap": 30, **kw}
    g = OutageGuard("work", stop=stop, clock=lambda: clock.now, probe=database.probe, **options)
    return g, stop


def test_it_logs_one_line_when_the_database_goes_and_one_when_it_is_back(caplog):
    database = Database(outage=6)
    g, _stop = guard(database)
    caplog.set_level(logging.INFO, logger="recovery.ops.outage")
    assert g.step(lambda: 7) == 7
    assert g.step(down) is None  # returns once the database answers again
    assert database.probes == 7
    assert g.step(lambda: "did work") == "did work"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("work: database unavailable (OperationalError: terminating")
    assert lines[1].startswith("work: database available again after")
    assert g.outages == 1 and not g.down


def test_the_backoff_doubles_up_to_the_cap_with_jitter():
    g, stop = guard(Database(outage=6), cap=8)
    g.step(down)
    # Full jitter between half and all of 1, 2, 4, 8, 8, 8, 8 seconds.
    for wait, ceiling in zip(stop.waits, [1, 2, 4, 8, 8, 8, 8], strict=True):
        assert ceiling / 2 <= wait <= ceiling


def test_past_the_limit_it_raises_one_line_naming_the_limit():
    g, _stop = guard(Database(outage=1000), limit=20, cap=4)
    with pytest.raises(DatabaseOutage) as info:
        g.step(down)
    message = str(info.value)
    assert "\n" not in message
    assert "over the 20 s limit (SALVAGE_DB_OUTAGE_LIMIT)" in message
    assert "connection refused" in message  # the latest error, not the first


def test_a_database_that_comes_back_resets_the_limit():
    database = Database(outage=4)  # about 11 s down
    g, _stop = guard(database, limit=20, cap=4)
    g.step(down)
    database.probes = 0  # a second outage of about 11 s: over 20 s in total, not in one
    g.step(down)
    assert g.outages == 2


def test_other_errors_are_not_swallowed():
    g, _stop = guard(Database(outage=0))
    with pytest.raises(ZeroDivisionError):
        g.step(lambda: 1 / 0)


def test_a_missing_table_or_column_is_raised_not_waited_out():
    # SQLite says so with an OperationalError, as for a lock: the code is newer than the
    # database's migrations, and no wait mends that.
    database = Database(outage=0)
    g, stop = guard(database)
    for message in ("no such column: recovery_observation.x", "no such table: recovery_task"):
        with pytest.raises(OperationalError, match="no such"):
            g.step(lambda m=message: down(m))
    assert (database.probes, stop.waits, g.outages) == (0, [], 0)
    g.step(lambda: down("database is locked"))  # a lock is waited out as before
    assert g.outages == 1


def test_a_stop_request_ends_the_wait_at_once():
    stop = threading.Event()
    stop.set()
    database = Database(outage=1000)
    g = OutageGuard("deliver", stop=stop, limit=600, cap=30, probe=database.probe)
    assert g.step(down) is None  # the loop sees the stop and exits
    assert database.probes == 0
