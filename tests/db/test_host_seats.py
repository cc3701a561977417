"""A host's concurrent places, shared by every worker (recovery.fetch.hostseats).

The seats are HostSeat rows taken by one UPDATE ... RETURNING each and released by one UPDATE
fenced by the holder's token, judged by the database clock; a seat whose holder died frees
itself when its `held_until` passes. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid

import pytest

from recovery.fetch import hostseats, servant
from recovery.fetch.errors import SeatDeferred, TurnDeferred
from recovery.models import HostSeat
from recovery.providers.direct import DirectProvider

HOST = "shop.test:80"


def token() -> str:
    return uuid.uuid4().hex


def served(make_coro):
    """Run a coroutine on its own thread's event loop while this (main) thread serves its
    database calls, as a worker's main thread does (recovery.fetch.servant)."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            done.set_result(asyncio.run(make_coro()))
        except BaseException as exc:  # handed back to the test
            done.set_exception(exc)

    with servant.serving() as serving:
        thread = threading.Thread(target=run)
        thread.start()
        assert serving.serve(done, timeout=30), "the coroutine did not finish in 30 s"
        thread.join(timeout=10)
    return done.result()


@pytest.mark.django_db
def test_it_grants_no_more_seats_than_the_cap_and_a_release_frees_one():
    holders = [token() for _ in range(3)]
    assert [hostseats.take_now(HOST, 2, t, 30.0) for t in holders] == [0, 1, None]
    assert HostSeat.objects.filter(host=HOST).count() == 2  # made on first use, cap's worth

    # A release by someone who does not hold the seat frees nothing.
    hostseats.release_now(HOST, 0, holders[2])
    assert hostseats.take_now(HOST, 2, token(), 30.0) is None

    hostseats.release_now(HOST, 0, holders[0])
    again = token()
    assert hostseats.take_now(HOST, 2, again, 30.0) == 0
    assert HostSeat.objects.get(host=HOST, seat=0).holder == again
    # Hosts are independent.
    assert hostseats.take_now("other.test", 2, token(), 30.0) == 0


@pytest.mark.django_db
def test_a_taker_only_uses_seats_below_its_own_cap():
    assert hostseats.take_now(HOST, 1, token(), 30.0) == 0
    assert hostseats.take_now(HOST, 1, token(), 30.0) is None
    # A dataset with a larger cap for the same host makes and takes the seats above.
    assert hostseats.take_now(HOST, 3, token(), 30.0) == 1
    assert hostseats.take_now(HOST, 3, token(), 30.0) == 2
    assert hostseats.take_now(HOST, 3, token(), 30.0) is None
    assert HostSeat.objects.filter(host=HOST).count() == 3


@pytest.mark.django_db
def test_a_seat_whose_time_passed_is_taken_over_and_its_old_holder_cannot_free_it():
    dead, alive = token(), token()
    assert hostseats.take_now(HOST, 1, dead, 30.0) == 0
    assert hostseats.take_now(HOST, 1, alive, 30.0) is None
    # The holder was SIGKILLed 40 s ago: its seat's time has passed (by the database clock).
    HostSeat.objects.filter(host=HOST, seat=0).update(held_until=time.time() - 10.0)
    assert hostseats.take_now(HOST, 1, alive, 30.0) == 0
    # The dead holder's release (or a late one) leaves the new holder's seat alone, and so
    # does its renewal.
    hostseats.release_now(HOST, 0, dead)
    assert not hostseats.renew_now(HOST, 0, dead, 30.0)
    assert HostSeat.objects.get(host=HOST, seat=0).holder == alive
    assert hostseats.take_now(HOST, 1, token(), 30.0) is None
    # The holder's renewal pushes its seat's time on.
    before = HostSeat.objects.get(host=HOST, seat=0).held_until
    assert hostseats.renew_now(HOST, 0, alive, 60.0)
    assert HostSeat.objects.get(host=HOST, seat=0).held_until > before + 25.0


@pytest.mark.django_db
def test_the_seat_time_is_the_database_clocks():
    hostseats.take_now(HOST, 1, token(), 12.0)
    held_until = HostSeat.objects.get(host=HOST, seat=0).held_until
    assert held_until == pytest.approx(time.time() + 12.0, abs=2.0)


@pytest.mark.django_db(transaction=True)
def test_concurrent_takers_on_their_own_connections_never_share_a_seat():
    """Eight threads, each with its own database connection, race for three seats."""
    hostseats.take_now(HOST, 3, token(), 0.0)  # the rows exist (and the seat is free again)
    HostSeat.objects.filter(host=HOST).update(held_until=0.0)
    start = threading.Barrier(8)
    results: list[int | None] = []
    lock = threading.Lock()

    def take() -> None:
        from django.db import connection as thread_connection

        try:
            start.wait(timeout=10)
            for _ in range(50):  # SQLite may answer "locked" under contention: try again
                try:
                    seat = hostseats.take_now(HOST, 3, token(), 30.0)
                    break
                except Exception as exc:
                    if "locked" not in str(exc):
                        raise
            with lock:
                results.append(seat)
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 8
    assert sorted(s for s in results if s is not None) == [0, 1, 2]
    assert results.count(None) == 5


@pytest.mark.django_db(transaction=True)
def test_a_page_waits_within_the_horizon_then_is_deferred_and_a_next_hop_waits_for_a_seat():
    held = token()
    assert hostseats.take_now(HOST, 1, held, 30.0) == 0
    seats = hostseats.SharedSeats(deadline=2.0, horizon=0.3)

    async def page():
        started = time.monotonic()
        with pytest.raises(SeatDeferred) as deferred:
            await seats.take(HOST, 1, may_defer=True)
        return time.monotonic() - started, deferred.value

    waited, exc = served(page)
    assert 0.1 <= waited <= 5.0  # looked again for a while, then gave up
    assert isinstance(exc, TurnDeferred)  # so every provider defers it (Outcome.deferred)
    assert exc.wait == hostseats.MIN_DEFER
    assert "1 concurrent request" in exc.detail and HOST in exc.detail

    # A request that may not be deferred (robots.txt, a redirect's next hop) waits until the
    # seat frees: here its holder died and its time passes in about half a second.
    HostSeat.objects.filter(host=HOST, seat=0).update(held_until=time.time() + 0.5)

    async def next_hop():
        seat = await seats.take(HOST, 1, may_defer=False)
        assert seat is not None
        await seats.release(seat)
        return seat

    seat = served(next_hop)
    assert seat.number == 0 and seat.token != held
    assert HostSeat.objects.get(host=HOST, seat=0).held_until == 0  # released


@pytest.mark.django_db
def test_without_a_worker_serving_calls_the_process_bounds_itself():
    seats = hostseats.SharedSeats(deadline=2.0, horizon=0.0)
    assert asyncio.run(seats.take(HOST, 1, may_defer=True)) is None
    assert not HostSeat.objects.exists()


def test_only_a_per_host_the_spec_sets_below_its_concurrency_is_every_workers():
    def shared(**options) -> bool:
        return DirectProvider(**options).fetcher.seats is not None

    assert shared(concurrency=16, per_host=2)
    assert not shared(concurrency=16)  # the default per_host (8): per process, no statements
    assert not shared(concurrency=16, per_host=16)  # no per-host bound within a worker
    assert not shared(concurrency=200, per_host=hostseats.MAX_SEATS + 1)
