"""Riding out a database (or Redis broker) outage in the long-running loops (work, dispatch,
deliver, qcluster).

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

When django-q2's broker is Redis (REDIS_URL), a Redis restart is met the same way: the step's
connection error is waited out with the same backoff and limit, probing Redis instead.
"""

from __future__ import annotations

import functools
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
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
    psycopg = None
else:
    # The hot paths (the claim, COPY, named cursors) use psycopg's cursor directly, whose
    # errors Django does not wrap.
    DATABASE_ERRORS = (*DATABASE_ERRORS, psycopg.OperationalError, psycopg.InterfaceError)


def broker_errors() -> tuple[type[Exception], ...]:
    """What redis-py raises while Redis restarts or is gone (refused, reset, "loading the
    dataset", timed out).

    Asked when an exception is being matched, not at import: a redis-py error can only exist
    once redis is imported (the Redis broker imports it), and importing it here cost every
    ORM-broker worker ~0.1 s of CPU at start-up."""
    redis = sys.modules.get("redis")
    if redis is None:
        return ()
    return (redis.ConnectionError, redis.TimeoutError)


def outage_errors() -> tuple[type[Exception], ...]:
    """The errors of a database or broker outage (an `except outage_errors():` clause is
    evaluated only when an exception is being matched)."""
    return DATABASE_ERRORS + broker_errors()


# SQLite reports a missing table or column (code newer than the database's migrations) as an
# OperationalError, as it does a lock; no wait makes it go away, so it is raised, not waited
# out (a loop waiting it out logged "unavailable" and "available again" forever).
_SQLITE_SCHEMA_ERRORS = ("no such table", "no such column", "has no column named")


def schema_error(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and any(
        text in str(exc) for text in _SQLITE_SCHEMA_ERRORS
    )


class DatabaseOutage(RuntimeError):
    """The database (or the Redis broker) stayed unreachable past the configured limit."""


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
        on_back: Callable[[datetime], object] | None = None,
    ) -> None:
        self.name = name
        self.stop = stop or threading.Event()
        self.limit = float(settings.SALVAGE_DB_OUTAGE_LIMIT if limit is None else limit)
        self.cap = float(settings.SALVAGE_DB_RETRY_CAP if cap is None else cap)
        self.base = base
        self.clock = clock
        self.probe = probe
        # Called with the wall-clock time the outage was noticed, once the database answers
        # again and before the loop resumes (`work` gives back its leases: no crash).
        self.on_back = on_back
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
        except outage_errors() as exc:
            if schema_error(exc):
                raise
            self.wait_out(exc)
            return None

    def wait_out(self, exc: BaseException) -> None:
        """Back off and probe until the database (or broker) answers; DatabaseOutage past the
        limit."""
        close_connections()
        what, probe = resource_of(exc)
        probe = self.probe or probe
        self.down_since = self.clock()
        noticed_at = datetime.now(UTC)
        self.outages += 1
        failures = 0
        log.warning(
            "%s: %s unavailable (%s); retrying with backoff up to %g s, giving up after %g s",
            self.name,
            what,
            _short(exc),
            self.cap,
            self.limit,
            extra={"event": _event(what, "unavailable")},
        )
        while True:
            failures += 1
            down_for = self.clock() - self.down_since
            if down_for >= self.limit:
                raise DatabaseOutage(
                    f"{self.name}: {what} unavailable for {down_for:.0f} s, over the "
                    f"{self.limit:g} s limit (SALVAGE_DB_OUTAGE_LIMIT); exiting: {_short(exc)}"
                ) from None
            delay = min(backoff(failures, self.cap, self.base), self.limit - down_for)
            if self.stop.wait(delay):
                return  # SIGTERM: the loop exits; nothing is half-done
            try:
                probe()
                if self.on_back is not None:
                    self.on_back(noticed_at)
            except outage_errors() as again:
                close_connections()
                exc = again
                continue
            log.warning(
                "%s: %s available again after %.0f s; resuming",
                self.name,
                what,
                self.clock() - self.down_since,
                extra={"event": _event(what, "available")},
            )
            self.down_since = None
            return


def backoff(failures: int, cap: float, base: float = 1.0) -> float:
    """The wait before retry number `failures` (1, 2, ...): capped exponential with half
    jitter, so processes that lost the database together do not all return in step."""
    delay = min(cap, base * 2 ** (max(failures, 1) - 1))
    return random.uniform(delay / 2, delay)


def probe_database() -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")


def probe_broker() -> None:
    """PING the Redis broker (REDIS_URL); nothing to do for the ORM broker (it is the
    database)."""
    url = settings.Q_CLUSTER.get("redis")
    if not url:
        return
    # One client per process (qcluster probes twice a second); its pool reconnects by itself.
    client = _probe_clients.get(url)
    if client is None:
        import redis

        client = _probe_clients[url] = redis.Redis.from_url(
            url, socket_connect_timeout=2, socket_timeout=2
        )
    client.ping()


_probe_clients: dict = {}  # url -> redis.Redis


def resource_of(exc: BaseException) -> tuple[str, Callable[[], None]]:
    """What went away, for the log line, and how to tell when it is back."""
    if isinstance(exc, broker_errors()):
        return "Redis broker", probe_broker
    return "database", probe_database


def unreachable(exc: BaseException) -> bool:
    """True when `exc` is an outage error and its database or broker does not answer a probe
    now; False for a real error that only looks like one (SQLite's "no such table" is an
    OperationalError too), which must then be raised and logged as ever."""
    if not isinstance(exc, outage_errors()):
        return False
    _what, probe = resource_of(exc)
    try:
        probe()
    except outage_errors():
        close_connections()
        return True
    return False


class QuietOutageFilter(logging.Filter):
    """Drops a django-q2 record caused by an outage that is still going on (the qcluster
    command's guard has said so in one line); keeps every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else record.msg
        return not (isinstance(exc, BaseException) and unreachable(exc))


class OutageNotice:
    """One line when a server process (the web server) first meets an outage, one when the
    database answers again, instead of a line (and a traceback) per request; thread-safe, per
    process. `noticed(exc)` is True when `exc` is an outage to ride out (see `ride_out`)."""

    def __init__(self, name: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self.down_since: float | None = None
        self._lock = threading.Lock()

    def noticed(self, exc: BaseException) -> bool:
        if not isinstance(exc, outage_errors()) or schema_error(exc) or not ride_out(exc):
            return False
        what = resource_of(exc)[0]
        with self._lock:
            if self.down_since is None:
                self.down_since = self.clock()
                log.warning(
                    "%s: %s unavailable (%s); answering 503 until it is back",
                    self.name,
                    what,
                    _short(exc),
                    extra={"event": _event(what, "unavailable")},
                )
        return True

    def check_back(self) -> None:
        """While an outage is noticed: probe, and say once that it is over."""
        if self.down_since is None:
            return
        try:
            probe_database()
        except outage_errors():
            close_connections()
            return
        with self._lock:
            if self.down_since is None:
                return
            log.warning(
                "%s: database available again after %.0f s",
                self.name,
                self.clock() - self.down_since,
                extra={"event": "database_available"},
            )
            self.down_since = None


def lost_connection(exc: BaseException) -> bool:
    """True when PostgreSQL dropped or refused the connection (no SQLSTATE, class 08, or
    57P01-57P03: shutting down, crash shutdown, cannot connect now), whether or not it is back
    already; never for an error that a statement caused."""
    if psycopg is None:
        return False
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    if not isinstance(cause, psycopg.Error):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in {"57P01", "57P02", "57P03"}


def ride_out(exc: BaseException) -> bool:
    """True for an outage to ride out: the database or broker does not answer, or it answers
    again but dropped this process's connection while it was away (a restart terminates every
    backend). This thread's connections are closed either way, so the next call reconnects."""
    if lost_connection(exc) or unreachable(exc):
        close_connections()
        return True
    return False


def skip_during_outage(fn: Callable[..., T]) -> Callable[..., T | str]:
    """For django-q2 task functions: a task that meets a database (or broker) outage returns
    one short line instead of failing with a traceback (django-q2 logs a failure's whole
    traceback, once per task). A queue item is only a wake-up: the work it would have done is
    still due in the tables, and the dispatcher sends another."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except outage_errors() as exc:
            if not ride_out(exc):
                raise
            return f"skipped: {resource_of(exc)[0]} unavailable ({_short(exc)})"

    return run


def _event(what: str, state: str) -> str:
    """database_unavailable, broker_available, ... (the JSON lines' `event`)."""
    return f"{'broker' if 'Redis' in what else 'database'}_{state}"


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__
