"""OutageGuard's policy: one line each way, capped backoff, a stop that interrupts, a limit.

The steps here raise what Django raises when PostgreSQL is gone; the real outages (connections
terminated, the database refusing connections) are in tests/worker/test_database_outage.py.
"""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import OperationalError

from recovery.outage import DatabaseOutage, OutageGuard


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
    def step():
        raise OperationalError(message)

    return step


def guard(**kw) -> tuple[OutageGuard, RecordingStop]:
    clock = Clock()
    stop = RecordingStop(clock)
    options = {"limit": 600, "cap": 30, **kw}
    return OutageGuard("work", stop=stop, clock=lambda: clock.now, **options), stop


def test_it_logs_one_line_when_the_database_goes_and_one_when_it_is_back(caplog):
    g, _stop = guard()
    caplog.set_level(logging.INFO, logger="recovery.outage")
    assert g.step(lambda: 7) == 7
    for _ in range(6):
        assert g.step(down()) is None
    assert g.step(lambda: "did work") == "did work"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("work: database unavailable (OperationalError: terminating")
    assert lines[1].startswith("work: database available again after")
    assert g.outages == 1 and not g.down


def test_the_backoff_doubles_up_to_the_cap_with_jitter():
    g, stop = guard(cap=8)
    for _ in range(7):
        g.step(down())
    # Full jitter between half and all of 1, 2, 4, 8, 8, 8, 8 seconds.
    for wait, ceiling in zip(stop.waits, [1, 2, 4, 8, 8, 8, 8], strict=True):
        assert ceiling / 2 <= wait <= ceiling


def test_past_the_limit_it_raises_one_line_naming_the_limit():
    g, _stop = guard(limit=20, cap=4)
    with pytest.raises(DatabaseOutage) as info:
        for _ in range(100):
            g.step(down("connection refused"))
    message = str(info.value)
    assert "\n" not in message
    assert "over the 20 s limit (SALVAGE_DB_OUTAGE_LIMIT)" in message
    assert "connection refused" in message


def test_a_database_that_comes_back_resets_the_limit():
    g, _stop = guard(limit=20, cap=4)
    for _ in range(5):  # about 11 s down
        g.step(down())
    g.step(lambda: None)
    for _ in range(5):  # another ~11 s: over 20 s in total, but not in one outage
        g.step(down())
    assert g.outages == 2


def test_other_errors_are_not_swallowed():
    g, _stop = guard()
    with pytest.raises(ZeroDivisionError):
        g.step(lambda: 1 / 0)


def test_a_stop_request_ends_the_wait_at_once():
    stop = threading.Event()
    stop.set()
    g = OutageGuard("deliver", stop=stop, limit=600, cap=30)
    assert g.step(down()) is None  # returns immediately: the loop sees the stop and exits
