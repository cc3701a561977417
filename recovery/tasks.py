"""django-q2 entry points only: each takes plain values, calls one engine function, returns a
short summary. django-q2 acknowledges a queue item after the function returns, so everything
here returns only after our COMMIT (commit first, acknowledge second)."""

from __future__ import annotations

import os
from typing import Any

from recovery import worker

_worker_id: str | None = None


def process_worker_id() -> str:
    # One lease owner per django-q2 worker process (a respawned process gets a new one).
    global _worker_id
    if _worker_id is None or f"-{os.getpid()}-" not in _worker_id:
        _worker_id = worker.new_worker_id("q")
    return _worker_id


def run_batch_task(batch_size: int | None = None, concurrency: int | None = None) -> dict[str, Any]:
    """A wake-up: claim up to batch_size due tasks, execute, commit, return a summary.

    A wake-up that finds nothing due (a duplicate delivery, or another worker was faster)
    claims nothing and returns at once: the lease table, not the queue, decides who works.
    """
    result = worker.run_batch(process_worker_id(), batch_size=batch_size, concurrency=concurrency)
    return result.as_dict()
