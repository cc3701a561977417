"""The database calls of the fetch wing's coroutines, run by the worker's main thread.

Providers run on the process's event loop, in its own thread (recovery.worker), where Django
refuses synchronous database calls; and the database belongs to the main thread (its
connection, its transactions, a test's database). While `worker.execute` waits for a batch its
main thread serves these calls: `await servant.call(fn, *args)` queues `fn(*args)` for it and
returns its result. Between heartbeats the main thread had nothing to do, so no connection is
added and no thread of ours ever holds a Django connection.

Used for what every worker must share: a host's politeness turns (recovery.fetch.hostslots),
each origin's robots.txt and its back-off (recovery.fetch.robots_state), a listing's stated
total (recovery.fetch.listing_totals). Outside a worker's batch (a provider driven by a test's
own event loop, a command) nothing serves: `call` raises `Unavailable` at once and the caller
keeps to what one process can do alone (its own spacing, its own robots.txt cache).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import queue
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

R = TypeVar("R")


class Unavailable(Exception):
    """No worker thread serves database calls in this process right now."""


class _Call:
    __slots__ = ("args", "fn", "future", "loop")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.fn, self.args, self.loop, self.future = fn, args, loop, future

    def run(self) -> None:
        try:
            result = self.fn(*self.args)
        except BaseException as exc:  # handed to the awaiting coroutine, which decides
            self.loop.call_soon_threadsafe(_settle, self.future, None, exc)
        else:
            self.loop.call_soon_threadsafe(_settle, self.future, result, None)

    def refuse(self) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, None, Unavailable("batch ended"))


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the awaiting coroutine was cancelled meanwhile
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class Servant:
    """The calls queued for one batch; the main thread runs them in `serve`."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._watched: set[int] = set()
        self.served = 0

    def put(self, call: _Call | None) -> None:
        self._queue.put(call)

    def serve(self, done: concurrent.futures.Future[Any], timeout: float) -> bool:
        """Run queued calls until `done` completes (True) or `timeout` seconds pass (False)."""
        if id(done) not in self._watched:
            self._watched.add(id(done))
            done.add_done_callback(lambda _f: self.put(None))  # wakes a get() waiting for calls
        deadline = time.monotonic() + timeout
        while not done.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                call = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if call is not None:  # None: the batch finished, look again
                call.run()
                self.served += 1
        return True

    def refuse_rest(self) -> None:
        while True:
            try:
                call = self._queue.get_nowait()
            except queue.Empty:
                return
            if call is not None:
                call.refuse()


# The servant of the batch this process is running, and the process it belongs to (a fork
# inherits the variable, not the thread that serves it).
_current: tuple[int, Servant] | None = None


@contextlib.contextmanager
def serving() -> Iterator[Servant]:
    """While the block runs, coroutines of this process may `call`, and the block must
    `serve`. Enter it before the coroutines start: a call made before would be refused."""
    global _current
    servant = Servant()
    _current = (os.getpid(), servant)
    try:
        yield servant
    finally:
        _current = None
        servant.refuse_rest()


def available() -> bool:
    current = _current
    return current is not None and current[0] == os.getpid()


async def call(fn: Callable[..., R], *args: Any) -> R:
    """fn(*args) on the main thread of the worker running this batch; Unavailable if none."""
    current = _current
    if current is None or current[0] != os.getpid():
        raise Unavailable("no worker batch serves database calls in this process")
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()
    current[1].put(_Call(fn, args, loop, future))
    return await future
