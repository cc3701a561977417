"""A second thread, with its own database connection, that commits one batch at a time.

`manage.py work` on PostgreSQL pipelines its batches (recovery.worker.run_forever): batch N's
commit runs here while the loop's thread claims and executes batch N+1. The serial loop keeps
one core busy at a time, the worker's between the claim and the commit and the database's
during them; overlapped, the commit's server time hides the next claim and execution
(bench/README.md, "Claim -> commit", pipelined batches).

One commit is outstanding at most: `submit` is called only after `wait` has collected the
previous one, so a worker holds at most two batches (one committing, one running). A commit
that raised re-raises from `wait` in the loop's thread, where the loop's own error handling
(recovery.ops.outage) sees it as before. Django connections belong to their thread, so this
thread's connection is checked before every commit and closed by `close`.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Generic, TypeVar

from django import db

from recovery.ops import outage

T = TypeVar("T")


def _fresh_connection() -> None:
    # What the loop does for its own thread between steps: a connection broken by an outage
    # or past CONN_MAX_AGE is dropped, and the next query reconnects.
    outage.close_broken_connections()
    db.close_old_connections()


class CommitLane(Generic[T]):
    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="salvage-commit")
        self._pending: concurrent.futures.Future[T] | None = None

    def submit(self, commit: Callable[[], T]) -> None:
        if self._pending is not None:
            raise RuntimeError("a commit is still outstanding: wait() for it first")

        def run() -> T:
            _fresh_connection()
            return commit()

        self._pending = self._pool.submit(run)

    def settle(self) -> None:
        """Block until the outstanding commit has finished (its exception, if any, raised
        now); its result stays for `wait`."""
        if self._pending is not None:
            self._pending.result()

    def wait(self) -> T | None:
        """The outstanding commit's result (None when there is none); its exception, if any."""
        pending, self._pending = self._pending, None
        return None if pending is None else pending.result()

    def close(self) -> T | None:
        """Wait for the outstanding commit, close this thread's connections, stop the thread.

        Returns the commit's result; re-raises its exception after closing."""
        try:
            return self.wait()
        finally:
            self._pool.submit(outage.close_connections).result()
            self._pool.shutdown(wait=True)
