"""What shared politeness costs a page (recovery.fetch.hostslots and hostseats, docs/workers.md).

    .venv/bin/python bench/politeness.py [--db sqlite|postgres] [-n 2000]

Five figures, each the median of 5 repetitions, in microseconds per page:
- `unspaced`: a host with no spacing (no Crawl-delay, no min_delay, no 429), the common case:
  what `Fetcher.gate(host)` and `async with gate.slot(may_defer=True)` cost now against the
  gate alone (`HostGate(..., shared=None)`, the code before shared turns). No database.
- `turn_sql`: one shared turn's statement (hostslots.take_now: UPDATE ... RETURNING on the
  host's row), called directly on the main thread.
- `turn_served`: the same turn as a page takes it, from a coroutine on the event loop's thread
  through the worker's main thread (recovery.fetch.servant) and back.
- `seat_sql`: one shared seat taken and released (hostseats.take_now and release_now: two
  UPDATEs on the seat's row), called directly on the main thread.
- `seat_served`: the same seat as a page takes and releases it (SharedSeats.take and
  .release), from a coroutine through the worker's main thread and back.
Only a host with a spacing pays the turn, once per request; such a host is asked at most
once per spacing, so the turns of all its pages cost at most 1/spacing statements a second.
Only a host whose spec sets a `per_host` below its concurrency pays the seat, on every request.

The database is a scratch one holding only the HostSlot and HostSeat tables: a temporary
SQLite file, or a scratch PostgreSQL database (BENCH_DATABASE_URL or DATABASE_URL names the
server; dropped at the end). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup(db: str) -> str | None:
    """Django on a scratch database with the politeness tables; the PostgreSQL name to drop."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
    scratch = None
    if db == "postgres":
        from bench import common

        scratch = "bench_politeness"
        os.environ["DATABASE_URL"] = common.scratch_database(scratch)
    else:
        path = Path(tempfile.mkdtemp()) / "politeness.sqlite3"
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    import django

    django.setup()
    from django.db import connection

    from recovery.models import HostSeat, HostSlot

    with connection.schema_editor() as editor:
        editor.create_model(HostSlot)
        editor.create_model(HostSeat)
    return scratch


def median_us(fn, n: int, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn(n)
        times.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(times)


def unspaced(n: int) -> tuple[float, float]:
    from recovery.fetch.fetcher import Fetcher
    from recovery.fetch.hostgate import HostGate

    fetcher = Fetcher(shared=True)
    bare = HostGate(8, 0.0, 2.0)

    async def now_path(k: int) -> None:
        for _ in range(k):
            async with fetcher.gate("shop.test:80").slot(may_defer=True):
                pass

    async def before(k: int) -> None:
        for _ in range(k):
            async with bare.slot():
                pass

    return (
        median_us(lambda k: asyncio.run(now_path(k)), n * 20),
        median_us(lambda k: asyncio.run(before(k)), n * 20),
    )


def turn_sql(n: int) -> float:
    from recovery.fetch import hostslots

    return median_us(
        lambda k: [hostslots.take_now("bench.test:80", 0.0001, None) for _ in range(k)], n
    )


def turn_served(n: int) -> float:
    from recovery.fetch import hostslots, servant

    async def pages(k: int) -> None:
        for _ in range(k):
            await servant.call(hostslots.take_now, "bench.test:80", 0.0001, None)

    return served_us(pages, n)


def seat_sql(n: int) -> float:
    from recovery.fetch import hostseats

    def pairs(k: int) -> None:
        for _ in range(k):
            token = uuid.uuid4().hex
            seat = hostseats.take_now("bench.test:80", 4, token, 30.0)
            assert seat is not None
            hostseats.release_now("bench.test:80", seat, token)

    return median_us(pairs, n)


def seat_served(n: int) -> float:
    from recovery.fetch import hostseats

    seats = hostseats.SharedSeats(deadline=30.0)

    async def pages(k: int) -> None:
        for _ in range(k):
            seat = await seats.take("bench.test:80", 4, may_defer=True)
            assert seat is not None
            await seats.release(seat)

    return served_us(pages, n)


def served_us(pages, n: int) -> float:
    """pages(k) run from a coroutine on another thread's loop, its calls served here."""
    from recovery.fetch import servant

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def run(k: int) -> None:
        with servant.serving() as serving:
            future = asyncio.run_coroutine_threadsafe(pages(k), loop)
            while not serving.serve(future, 10.0):
                pass
            future.result()

    try:
        return median_us(run, n)
    finally:
        loop.call_soon_threadsafe(loop.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("-n", type=int, default=2000, help="turns per repetition")
    args = parser.parse_args()
    scratch = setup(args.db)
    try:
        now_path, before = unspaced(args.n)
        result = {
            "bench": "politeness",
            "db": args.db,
            "unspaced_us": round(now_path, 2),
            "unspaced_before_us": round(before, 2),
            "turn_sql_us": round(turn_sql(args.n), 1),
            "turn_served_us": round(turn_served(args.n), 1),
            "seat_sql_us": round(seat_sql(args.n), 1),
            "seat_served_us": round(seat_served(args.n), 1),
            "loadavg": os.getloadavg(),
        }
    finally:
        if scratch:
            from bench import common

            common.drop_database(scratch)
    print(
        f"{args.db}: unspaced host {result['unspaced_us']} us/page "
        f"(gate alone {result['unspaced_before_us']}); shared turn {result['turn_sql_us']} us "
        f"(SQL), {result['turn_served_us']} us (from a coroutine, through the main thread); "
        f"shared seat taken and released {result['seat_sql_us']} us (SQL), "
        f"{result['seat_served_us']} us (from a coroutine)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
