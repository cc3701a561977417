"""Per-host politeness: how many requests one host gets at once, and how far apart.

In: the host's concurrency, its minimum spacing and the ceiling a 429 may raise it to; each
request's answer (`slow_down()` on a 429, `recover()` on a success). Out: `async with
gate.slot():`, a request's turn. `Fetcher` keeps one gate per host; robots.py raises a gate's
minimum spacing to a site's Crawl-delay.

The concurrency is this process's (a semaphore), and with `seats` (recovery.fetch.hostseats:
a `per_host` the spec sets below its concurrency) also every worker's: a request holds one of
the host's seats in the database while in flight. The spacing, once the host has one, is
every worker's: with `shared` (recovery.fetch.hostslots) a turn is taken from the host's row
in the database, so N workers together keep the spacing one worker would. Without them, or
while the database cannot answer, the gate bounds and spaces this process's requests alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from recovery.fetch.hostslots import margin

if TYPE_CHECKING:
    from recovery.fetch.hostseats import Seat, SharedSeats
    from recovery.fetch.hostslots import SharedTurns


class HostGate:
    """Concurrency and spacing for one host. A 429 doubles the spacing; a success halves it."""

    STEP = 0.25  # first spacing after a 429 when none is configured

    def __init__(
        self,
        per_host: int,
        min_delay: float,
        max_delay: float,
        *,
        host: str = "",
        shared: SharedTurns | None = None,
        seats: SharedSeats | None = None,
    ) -> None:
        self.host = host
        self.shared = shared
        self.seats = seats
        self.per_host = per_host
        self.semaphore = asyncio.Semaphore(per_host)
        self.min_delay = min_delay
        self.max_delay = max(max_delay, min_delay)
        self.interval = min_delay
        self.next_at = 0.0
        self.users = 0  # waiting or in flight

    @property
    def idle(self) -> bool:
        return self.users == 0 and self.interval <= self.min_delay

    def slot(self, *, may_defer: bool = False, always: bool = False) -> HostGate | SharedSlot:
        """`async with gate.slot():` one request's turn: a place among the host's concurrent
        requests, then the host's spacing. (The gate is its own context manager: a generator-
        based one cost ~3 us a fetch.)

        With shared seats, or a shared budget and a spacing, the place or the turn is every
        worker's (SharedSlot): a request that `may_defer` (a page's first hop) raises
        TurnDeferred (SeatDeferred for a seat) rather than wait past the budget's horizon.
        `always`: take a shared turn even without a spacing yet, waiting for the host's next
        free instant (robots.txt, read before its Crawl-delay is known)."""
        turn = self.shared is not None and (self.interval > 0 or always)
        if turn or self.seats is not None:
            return SharedSlot(self, may_defer, turn)
        return self

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.semaphore.acquire()
        except BaseException:  # cancelled while waiting: not a user any more
            self.users -= 1
            raise
        try:
            await self._space()
        except BaseException:
            self.semaphore.release()
            self.users -= 1
            raise

    async def _space(self) -> None:
        """This process's spacing: requests at least `interval` apart."""
        wait = self._reserve()
        if wait > 0:
            await asyncio.sleep(wait)  # politeness: a deliberate wait

    def _reserve(self) -> float:
        """Book this process's next spaced start: seconds until it."""
        if self.interval <= 0:
            return 0.0
        now = time.monotonic()
        start = max(now, self.next_at)
        self.next_at = start + self.interval
        return start - now

    async def __aexit__(self, *exc: object) -> None:
        self.semaphore.release()
        self.users -= 1

    def slow_down(self) -> None:
        self.interval = min(self.max_delay, max(self.interval * 2, self.STEP, self.min_delay))

    def recover(self) -> None:
        if self.interval > self.min_delay:
            halved = self.interval / 2
            self.interval = self.min_delay if halved < max(self.min_delay, 0.01) else halved


class SharedSlot:
    """One request's place and turn at a host when either is every worker's (HostGate.slot):
    the process's semaphore, then a seat (with `gate.seats`), then the turn (shared when
    `turn`, else the process's spacing); released in the reverse order."""

    __slots__ = ("gate", "may_defer", "seat", "turn")

    RETAKES = 3  # turns taken at most when woken late each time

    def __init__(self, gate: HostGate, may_defer: bool, turn: bool) -> None:
        self.gate = gate
        self.may_defer = may_defer
        self.turn = turn
        self.seat: Seat | None = None

    async def __aenter__(self) -> None:
        gate = self.gate
        gate.users += 1
        try:
            await gate.semaphore.acquire()
        except BaseException:
            gate.users -= 1
            raise
        try:
            if gate.seats is not None:
                # The seat before the turn: a request that waited for a seat after its turn
                # could leave closer than the spacing to the next one.
                self.seat = await gate.seats.take(
                    gate.host, gate.per_host, may_defer=self.may_defer
                )
            if self.turn:
                await self._shared_turn()
            else:
                await self._wait(gate._reserve())
        except BaseException:  # TurnDeferred and SeatDeferred included: nothing was sent
            await self._leave()
            raise

    async def _shared_turn(self) -> None:
        gate = self.gate
        assert gate.shared is not None
        may_defer = self.may_defer
        for _ in range(self.RETAKES):
            wait = await gate.shared.take(gate.host, gate.interval, may_defer=may_defer)
            if wait is None:  # no shared budget reachable: this process spaces alone
                await self._wait(gate._reserve())
                return
            due = time.monotonic() + wait
            await self._wait(wait)  # politeness: the host's turn, every worker's
            # Woken later than the turn's margin allows (a busy event loop, a stalled
            # process): the next turn may have begun, so take a new one rather than send
            # into it. Once the turn is ours the page waits for the next (no deferral).
            if time.monotonic() - due <= margin(gate.interval):
                return
            may_defer = False

    async def _wait(self, wait: float) -> None:
        """Sleep until the request's start, its seat (if any) kept past its deadline."""
        due = time.monotonic() + wait
        if self.seat is not None:
            assert self.gate.seats is not None
            await self.gate.seats.keep(self.seat, wait)
        # From `due`, not `wait`: a seat's renewal must not make the request late for its turn.
        remaining = due - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)

    async def _leave(self) -> None:
        seat, self.seat = self.seat, None
        try:
            if seat is not None:
                assert self.gate.seats is not None
                await self.gate.seats.release(seat)
        finally:
            self.gate.semaphore.release()
            self.gate.users -= 1

    async def __aexit__(self, *exc: object) -> None:
        await self._leave()
