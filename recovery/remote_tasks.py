"""django-q2 entry point for remote jobs (the dispatcher's tick hook sends these wake-ups)."""

from __future__ import annotations

from recovery import remote, worker

_worker_id: str | None = None


def poll_remote_jobs() -> str:
    """Send unsent jobs, reap lost senders, poll due jobs, mirror media handoffs."""
    global _worker_id
    if _worker_id is None:
        _worker_id = worker.new_worker_id("qr")
    did = remote.worker_step(_worker_id)
    return f"remote: {'worked' if did else 'nothing due'}"
