"""django-q2 entry points only: each takes plain values, calls one engine function, returns a
short summary (or, during a database or broker outage, one "skipped" line: see
recovery.ops.outage.skip_during_outage). django-q2 acknowledges a queue item after the function
returns, so everything here returns only after our COMMIT (commit first, acknowledge second).

Queued items name these functions by path (`recovery.tasks.<name>`); items queued before the
acceptance and remote entry points moved here name `recovery.acceptance_tasks.*` and
`recovery.remote_tasks.*`, which stay as aliases until such items have drained.
"""

from __future__ import annotations

from typing import Any

from recovery import remote, worker
from recovery.delivery import outbox
from recovery.ops import liveness, outage, qcluster_stopping
from recovery.quality import acceptance


@outage.skip_during_outage
def run_batch_task(batch_size: int | None = None, concurrency: int | None = None) -> dict[str, Any]:
    """A wake-up: claim up to batch_size due tasks, execute, commit, return a summary.

    A wake-up that finds nothing due (a duplicate delivery, or another worker was faster)
    claims nothing and returns at once: the lease table, not the queue, decides who works.
    Nor does one taken from the prefetch queue once the cluster is stopping: the drain is the
    batches in flight (recovery.ops.qcluster_stopping), and the dispatcher re-sends.
    """
    if qcluster_stopping.requested():
        return {"skipped": "the cluster is stopping"}
    result = worker.run_batch(
        liveness.process_worker_id(), batch_size=batch_size, concurrency=concurrency
    )
    return result.as_dict()


@outage.skip_during_outage
def advance_runs() -> str:
    """Complete finished recovery batches, make candidates, auto-accept."""
    return f"acceptance: {acceptance.advance_runs()} runs or batches moved"


@outage.skip_during_outage
def deliver_due(limit: int = 50) -> str:
    """Deliver due outbox events (a wake-up; the events table is the truth)."""
    return f"outbox: {outbox.deliver_due(limit)} attempted"


@outage.skip_during_outage
def deliver_event(event_id: str) -> str:
    return f"outbox {event_id}: {outbox.deliver_one(event_id) or 'not due'}"


@outage.skip_during_outage
def poll_remote_jobs() -> str:
    """Send unsent jobs, reap lost senders, poll due jobs, mirror media handoffs."""
    did = remote.worker_step(liveness.process_worker_id("qr"))
    return f"remote: {'worked' if did else 'nothing due'}"
