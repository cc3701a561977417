"""A host's politeness turns, shared by every worker on every machine.

In: a host, the spacing its requests need (its HostGate's interval: the larger of the spec's
`min_delay`, the site's Crawl-delay and a 429's slow-down), and whether the request may be
deferred (a page's first hop may; robots.txt, a redirect's next hop and a listing's head
re-read may not: they are part of a task already under way). Out: how long to wait before
sending, or `TurnDeferred`: the host's next turn is further away than a batch should wait
(SALVAGE_POLITENESS_WAIT), so the page goes back to retry_wait until then (Outcome.deferred:
not an attempt, no budget spent).

Why: each process spaced its own requests (HostGate), so two workers hit a host twice as often
as its Crawl-delay allows; and a batch slept through a slow host's turns while its other hosts'
pages, done long before, waited for the batch's commit (24.6 s in issue 30).

How: one HostSlot row per host that asks for spacing, instants in seconds by the database
clock. One UPDATE ... RETURNING takes a turn (`TAKE_SQL`):
- the host is free at `free = max(next_free, now)`;
- granted when `free <= now + horizon` (always, for a request that may not be deferred): the
  request starts at `free` and the next one may start `spacing` later (`next_free`);
- otherwise deferred to `max(tail, free)`, and `tail` moves one spacing on, so the deferred
  pages of a batch come back one turn apart instead of all at once. A deferral takes no turn:
  a page that comes back finds the host's next turn where the requests actually made left it.
On PostgreSQL the UPDATE's row lock serialises takers of one host (for one statement; other
hosts' rows are not touched). On SQLite, the one-machine fallback, the statement holds the
database's one write lock (the same table, the same statement). A host not seen before gets
its row from an INSERT ... ON CONFLICT DO NOTHING and the UPDATE is tried again.

Cost: only a host with a spacing pays, one statement per request, through the worker's main
thread (recovery.fetch.servant); a host without one never reaches here (docs/workers.md has the
measurement). When no worker serves database calls (a provider run outside a worker) or the
statement fails, `take` answers None and the process keeps its own spacing, as before.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from recovery.fetch import servant
from recovery.fetch.errors import TurnDeferred

log = logging.getLogger(__name__)

# The database clock in epoch seconds; `now()`-like values that stay fixed within a statement
# (recovery.fetch.hostseats uses them too).
DB_NOW = {
    "postgresql": "extract(epoch from statement_timestamp())::float8",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}
_GREATEST = {"postgresql": "greatest", "sqlite": "max"}
FLOAT_CAST = {"postgresql": "::float8", "sqlite": ""}


def take_sql(vendor: str) -> str:
    """Parameters: spacing, horizon (None: always granted), host. Returns (granted, wait)."""
    now, greatest, f = DB_NOW[vendor], _GREATEST[vendor], FLOAT_CAST[vendor]
    free = f"{greatest}(next_free, p.now)"
    grant = f"(p.horizon IS NULL OR {free} <= p.now + p.horizon)"
    return (
        "UPDATE recovery_hostslot SET "
        f"last_granted = {grant}, "
        f"last_start = CASE WHEN {grant} THEN {free} ELSE {greatest}(tail, {free}) END, "
        f"next_free = CASE WHEN {grant} THEN {free} + p.spacing ELSE next_free END, "
        f"tail = CASE WHEN {grant} THEN tail ELSE {greatest}(tail, {free}) + p.spacing END, "
        "spacing = p.spacing "
        f"FROM (SELECT {now} AS now, %s{f} AS spacing, %s{f} AS horizon) AS p "
        "WHERE host = %s "
        # RETURNING sees the row as written; `now` is the statement's (fixed within it).
        f"RETURNING last_granted, last_start - {now}"
    )


def note_sql(vendor: str) -> str:
    """A request to the host was just made outside a turn (robots.txt, read before its
    Crawl-delay was known): the next turn is `spacing` from now. Parameters: spacing, host."""
    now, greatest, f = DB_NOW[vendor], _GREATEST[vendor], FLOAT_CAST[vendor]
    return (
        f"UPDATE recovery_hostslot SET next_free = {greatest}(next_free, {now} + %s{f}) "
        "WHERE host = %s RETURNING 1"
    )


INSERT_SQL = (
    "INSERT INTO recovery_hostslot (host, next_free, tail, last_start, last_granted, spacing) "
    "VALUES (%s, 0, 0, 0, %s, 0) ON CONFLICT (host) DO NOTHING"
)


def _execute(sql: str, params: list[Any], host: str) -> tuple[Any, ...] | None:
    """The statement on this thread's connection; the host's row is made on first use."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            cursor.execute(INSERT_SQL, [host, False])
            cursor.execute(sql, params)
            row = cursor.fetchone()
    return row


def margin(spacing: float) -> float:
    """What a turn adds to the spacing: a request leaves the worker a little after its turn
    starts (a thread hop, a busy event loop), and a late request must not bring the next one
    closer than the spacing. 10% of it, at most 100 ms: on a loaded box (two cores, load 7)
    a request reached the site 145 ms after its turn, and at most 50 ms let two requests of
    a 1 s Crawl-delay arrive 0.905 s apart; 10% costs a Crawl-delay host a tenth of its pace."""
    return min(0.1 * spacing, 0.1)


def take_now(host: str, spacing: float, horizon: float | None) -> tuple[bool, float]:
    """Take the host's next turn (main thread): (granted, seconds until the turn)."""
    from django.db import connection

    spacing += margin(spacing)
    row = _execute(take_sql(connection.vendor), [spacing, horizon, host], host)
    assert row is not None
    return bool(row[0]), float(row[1])


def note_now(host: str, spacing: float) -> None:
    from django.db import connection

    spacing += margin(spacing)
    _execute(note_sql(connection.vendor), [spacing, host], host)


class SharedTurns:
    """The hosts' shared turns for one Fetcher (`horizon`: how far a deferrable request may
    wait in process before it is deferred instead)."""

    QUIET = 60.0  # seconds between two log lines about a failing statement

    def __init__(self, horizon: float | None = None) -> None:
        self.horizon = horizon  # None: SALVAGE_POLITENESS_WAIT, read at each turn
        self._complained = 0.0

    async def take(self, host: str, spacing: float, *, may_defer: bool) -> float | None:
        """Seconds to wait for the host's turn, None when the process must space alone;
        TurnDeferred when a deferrable request's turn is past the horizon."""
        horizon = None
        if may_defer:
            from django.conf import settings

            horizon = (
                self.horizon
                if self.horizon is not None
                else float(settings.SALVAGE_POLITENESS_WAIT)
            )
        try:
            granted, wait = await servant.call(take_now, host, spacing, horizon)
        except servant.Unavailable:
            return None
        except Exception as exc:  # the database failed: keep the process's own spacing
            self._complain(host, exc)
            return None
        if not granted:
            raise TurnDeferred(host, wait, spacing)
        return max(wait, 0.0)

    async def note(self, host: str, spacing: float) -> None:
        """A request just made outside a turn counts: the next turn is `spacing` away."""
        try:
            await servant.call(note_now, host, spacing)
        except servant.Unavailable:
            return
        except Exception as exc:  # as in take: the process's own spacing still holds
            self._complain(host, exc)

    def _complain(self, host: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._complained > self.QUIET:
            self._complained = now
            log.warning("shared politeness for %s unavailable (%s): spacing per process", host, exc)
