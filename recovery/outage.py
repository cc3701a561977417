"""Riding out a database outage in the long-running loops (work, dispatch, deliver, tasks).

A PostgreSQL restart (`pg_ctl restart -m fast`: "terminating connection due to administrator
command", then "connection refused" until it is back) used to end every loop with a traceback.
`OutageGuard.step(fn)` runs one step of a loop; when the step fails because the database is
unreachable it:
- closes the process's connections (a broken one must not be reused; the step's transaction,
  if any, was already rolled back by `atomic()` on its way out, so nothing is half-done);
- logs one line when the database goes away and one when it is back (not one per retry);
- waits with capped exponential backoff and full jitter (1 s, 2 s, 4 s ... up to
  SALVAGE_DB_RETRY_CAP), interruptible by the loop's stop event (SIGTERM still exits promptly);
- and past SALVAGE_DB_OUTAGE_LIMIT seconds of continuous outage raises `DatabaseOutage`, whose
  message is the one line the command exits with (status 1).
Leases that expired meanwhile are taken over as usual by whichever worker claims next: the
outage changes nothing in the fencing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a lost or refused connection raises through Django (psycopg's AdminShutdown,
# "connection refused", "server closed the connection unexpectedly", "the connection is
# closed"). SQLite's "database is locked" is an OperationalError too; a lock is no outage, but
# waiting and retrying is the right answer to it as well.
DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
try:
    import psycopg
except ImportError:  # SQLite-only installs
    pass
else:
    # The hot paths (the claim, COPY, named cursors) use psycopg's cursor directly, whose
    # errors Django does not wrap.
    DATABASE_ERRORS = (*DATABASE_ERRORS, psycopg.OperationalError, psycopg.InterfaceError)


class DatabaseOutage(RuntimeError):
    """The database stayed unreachable past the configured limit."""


def close_connections() -> None:
    """Drop every connection of this thread, broken or not; the next query reconnects."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:  # closing a dead socket may raise; it is closed either way
            conn.connection = None


def close_broken_connections(**_signal: object) -> int:
    """Close this thread's connections whose driver connection is broken or closed (psycopg
    marks them when a query meets a dead server); returns how many. Django's own check only
    looks at connections that raised through its wrappers."""
    closed = 0
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is not None and (getattr(raw, "broken", False) or getattr(raw, "closed", False)):
            try:
                conn.close()
            except Exception:
                conn.connection = None
            closed += 1
    return closed


class OutageGuard:
    """Runs the steps of one loop; see the module docstring."""

    def __init__(
        self,
        name: str,
        *,
        stop: threading.Event | None = None,
        limit: float | None = None,
        cap: float | None = None,
        base: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.stop = stop or threading.Event()
        self.limit = float(settings.SALVAGE_DB_OUTAGE_LIMIT if limit is None else limit)
        self.cap = float(settings.SALVAGE_DB_RETRY_CAP if cap is None else cap)
        self.base = base
        self.clock = clock
        self.probe = probe or probe_database
        self.down_since: float | None = None
        self.outages = 0  # how many times the database went away (for tests and logs)

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def step(self, fn: Callable[[], T]) -> T | None:
        """fn(), or None after waiting out a database failure until the database answers
        again (or a stop is requested); the loop then simply goes on."""
        try:
            return fn()
        except DATABASE_ERRORS as exc:
            self.wait_out(exc)
            return None

    def wait_out(self, exc: BaseException) -> None:
        """Back off and probe until the database answers; DatabaseOutage past the limit."""
        close_connections()
        self.down_since = self.clock()
        self.outages += 1
        failures = 0
        log.warning(
            "%s: database unavailable (%s); retrying with backoff up to %g s, giving up after %g s",
            self.name,
            _short(exc),
            self.cap,
            self.limit,
        )
        while True:
            failures += 1
            down_for = self.clock() - self.down_since
            if down_for >= self.limit:
                raise DatabaseOutage(
                    f"{self.name}: database unavailable for {down_for:.0f} s, over the "
                    f"{self.limit:g} s limit (SALVAGE_DB_OUTAGE_LIMIT); exiting: {_short(exc)}"
                ) from None
            delay = min(self.cap, self.base * 2 ** (failures - 1), self.limit - down_for)
            # Full jitter: processes that lost the database together do not return in step.
            if self.stop.wait(random.uniform(delay / 2, delay)):
                return  # SIGTERM: the loop exits; nothing is half-done
            try:
                self.probe()
            except DATABASE_ERRORS as again:
                close_connections()
                exc = again
                continue
            log.warning(
                "%s: database available again after %.0f s; resuming",
                self.name,
                self.clock() - self.down_since,
            )
            self.down_since = None
            return


def probe_database() -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__
