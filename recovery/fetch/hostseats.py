"""A host's concurrent places (`per_host`), shared by every worker on every machine.

In: a host, the spec's `per_host` (its cap), the request deadline, and whether the request may
be deferred (a page's first hop may; robots.txt and a redirect's next hop may not, as with
turns: recovery.fetch.hostslots). Out: a `Seat` held while the request is in flight and
released after it, or `SeatDeferred`: every seat stayed taken for SALVAGE_POLITENESS_WAIT, so
the page goes back to retry_wait (Outcome.deferred: not an attempt, no budget spent).

Why: `per_host` was an asyncio.Semaphore per process (HostGate), so two workers with
`per_host = 2` could have four requests in flight to one host (issue 30).

How: one HostSeat row per (host, seat number), made on first use for seats 0 .. cap - 1. A
seat is free when its `held_until` (seconds, by the database clock) has passed. Taking one is
one UPDATE ... RETURNING (`take_sql`) on the lowest free seat below the taker's cap, setting a
fresh holder token and `held_until = now + ttl`; releasing is one UPDATE fenced by the token
(`RELEASE_SQL`), so a late release cannot free a seat someone took over. Rows, not a counter
on HostSlot: a counter cannot tell which of its units a dead worker held, while a row's own
`held_until` frees it. The ttl is the request's deadline plus GRACE, renewed (`keep`) before a
request that waits longer for its turn, so a live request never loses its seat and a SIGKILLed
worker blocks a seat for one ttl at most (SALVAGE_REQUEST_DEADLINE + 5 s by default).
- PostgreSQL: the inner SELECT takes the seat's row with FOR UPDATE SKIP LOCKED, so
  concurrent takers of one host each get a different seat, or none, without queueing on each
  other; the outer WHERE checks the seat is still free under the lock.
- SQLite (one machine): the statement holds the database's one write lock.
Two datasets naming the same host with different caps: each taker only uses seats below its
own cap, so the host never has more in flight than the largest cap, and the smaller cap's
pages go only while fewer than that many are in flight.

Cost: two durable statements per request (take and release, through the worker's main thread:
recovery.fetch.servant), so only a host whose spec sets a `per_host` below its concurrency
pays (the direct provider's `shares_per_host`); the default per_host stays per process.
docs/workers.md has the measurement. Fallback: without a worker serving database calls (a
provider run outside a worker), or while the statement fails, `take` answers None and the
process's own semaphore is the only bound, as before. A release that cannot be made (the batch
ended, the database failed, a take cancelled after its statement was queued) leaves the seat
to its `held_until`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from recovery.fetch import servant
from recovery.fetch.errors import SeatDeferred
from recovery.fetch.hostslots import DB_NOW, FLOAT_CAST

log = logging.getLogger(__name__)

GRACE = 5.0  # seconds a seat outlives its request's deadline (a busy loop, the release's hop)
MAX_SEATS = 64  # a larger per_host is not a politeness limit: it stays per process
MIN_DEFER = 1.0  # a deferred page comes back no sooner (SALVAGE_POLITENESS_WAIT may be 0)
POLL_FIRST, POLL_MAX = 0.02, 0.25  # seconds between two looks for a free seat, doubling


def take_sql(vendor: str) -> str:
    """Parameters: token, ttl, host, cap. Returns (seat,) or no row when none is free."""
    now, f = DB_NOW[vendor], FLOAT_CAST[vendor]
    # SKIP LOCKED: a seat another taker is taking right now is not free for this one.
    lock = " FOR UPDATE SKIP LOCKED" if vendor == "postgresql" else ""
    return (
        f"UPDATE recovery_hostseat SET holder = %s, held_until = {now} + %s{f} "
        "WHERE id = (SELECT id FROM recovery_hostseat "
        f"WHERE host = %s AND seat < %s AND held_until <= {now} ORDER BY seat LIMIT 1{lock}) "
        f"AND held_until <= {now} "
        "RETURNING seat"
    )


def renew_sql(vendor: str) -> str:
    """Parameters: ttl, host, seat, token. A row when the seat is still this holder's."""
    now, f = DB_NOW[vendor], FLOAT_CAST[vendor]
    return (
        f"UPDATE recovery_hostseat SET held_until = {now} + %s{f} "
        "WHERE host = %s AND seat = %s AND holder = %s RETURNING 1"
    )


RELEASE_SQL = (
    "UPDATE recovery_hostseat SET holder = '', held_until = 0 "
    "WHERE host = %s AND seat = %s AND holder = %s"
)


def insert_sql(cap: int) -> str:
    """The host's seats 0 .. cap - 1 that do not exist yet. Parameters: host, once a seat."""
    values = ", ".join(f"(%s, {n}, '', 0)" for n in range(cap))
    return (
        "INSERT INTO recovery_hostseat (host, seat, holder, held_until) "
        f"VALUES {values} ON CONFLICT (host, seat) DO NOTHING"
    )


def take_now(host: str, cap: int, token: str, ttl: float) -> int | None:
    """Take a free seat of the host below `cap` (main thread): its number, or None."""
    from django.db import connection

    sql = take_sql(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, [token, ttl, host, cap])
        row = cursor.fetchone()
        if row is None:
            # None free, or not made yet (a new host, a larger cap): make the missing ones,
            # and look again only if there were any.
            cursor.execute(insert_sql(cap), [host] * cap)
            if cursor.rowcount > 0:
                cursor.execute(sql, [token, ttl, host, cap])
                row = cursor.fetchone()
    return None if row is None else int(row[0])


def renew_now(host: str, seat: int, token: str, ttl: float) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(renew_sql(connection.vendor), [ttl, host, seat, token])
        return cursor.fetchone() is not None


def release_now(host: str, seat: int, token: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(RELEASE_SQL, [host, seat, token])


@dataclass(slots=True)
class Seat:
    host: str
    number: int
    token: str
    until: float  # time.monotonic() by which the database frees it (at the latest)


class SharedSeats:
    """The hosts' shared seats for one Fetcher. `deadline`: the longest a request is in
    flight (FetchLimits.deadline); `horizon`: how long a deferrable request looks for a free
    seat before it is deferred (None: SALVAGE_POLITENESS_WAIT, read at each take)."""

    QUIET = 60.0  # seconds between two log lines about a failing statement

    def __init__(self, deadline: float, horizon: float | None = None) -> None:
        self.deadline = deadline
        self.horizon = horizon
        self._complained = 0.0

    @property
    def ttl(self) -> float:
        return self.deadline + GRACE

    async def take(self, host: str, cap: int, *, may_defer: bool) -> Seat | None:
        """A seat of the host, None when the process must bound itself alone; SeatDeferred
        when a deferrable request found none free within the horizon."""
        horizon = self._horizon() if may_defer else None
        started = time.monotonic()
        pause = POLL_FIRST
        while True:
            token = uuid.uuid4().hex
            asked = time.monotonic()
            try:
                number = await servant.call(take_now, host, cap, token, self.ttl)
            except servant.Unavailable:
                return None
            except Exception as exc:  # the database failed: the process's semaphore holds
                self._complain(host, exc)
                return None
            if number is not None:
                return Seat(host, number, token, asked + self.ttl)
            if horizon is not None and time.monotonic() - started + pause > horizon:
                raise SeatDeferred(host, max(horizon, MIN_DEFER), cap)
            # Every seat is in flight: requests end within their deadline (or their seat
            # expires), so look again soon. A wait on a condition with a deadline (the
            # horizon) for a page; robots.txt and a next hop wait until a seat frees.
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX)

    async def keep(self, seat: Seat, wait: float) -> None:
        """The request leaves in `wait` seconds: make its seat outlast its deadline after
        that (one statement, only when the wait eats into the seat's grace)."""
        if time.monotonic() + wait + self.deadline + GRACE / 2 <= seat.until:
            return
        ttl = wait + self.ttl
        asked = time.monotonic()
        try:
            kept = await servant.call(renew_now, seat.host, seat.number, seat.token, ttl)
        except servant.Unavailable:
            return
        except Exception as exc:  # as in take; the semaphore still bounds this process
            self._complain(seat.host, exc)
            return
        if kept:
            seat.until = asked + ttl
        else:
            # Only a process stalled past its seat's ttl gets here: the request goes anyway
            # (the turn is taken), and may be one over the cap this once.
            log.warning("seat %s of %s expired before its request left", seat.number, seat.host)

    async def release(self, seat: Seat) -> None:
        try:
            await servant.call(release_now, seat.host, seat.number, seat.token)
        except servant.Unavailable:
            return  # the batch ended first: the seat frees itself at held_until
        except Exception as exc:  # as in take: held_until frees the seat
            self._complain(seat.host, exc)

    def _horizon(self) -> float:
        if self.horizon is not None:
            return self.horizon
        from django.conf import settings

        return float(settings.SALVAGE_POLITENESS_WAIT)

    def _complain(self, host: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._complained > self.QUIET:
            self._complained = now
            log.warning("shared per_host for %s unavailable (%s): bound per process", host, exc)
