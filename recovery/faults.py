"""Fault injection for crash tests: `point(name)` SIGKILLs this process at a named point.

Inert in production: nothing happens unless SALVAGE_FAULT_POINT names the point. The crash
tests of seed 002's table set it on real worker processes:

- after_claim: leases taken, nothing fetched yet
- after_fetch: the provider returned, nothing committed yet
- in_commit: inside the commit transaction, before COMMIT
- after_commit: COMMIT done, before the function returns (django-q2 acknowledges on return)
- after_submit_before_save (recovery.remote): a provider accepted a remote job, its id is not
  saved yet; after_poll_before_commit: a status answer is in hand, nothing recorded yet

SALVAGE_FAULT_ONCE=/path makes the kill happen in only one process (the first to create that
file), so a respawned django-q2 worker or a second `work` process carries on normally.
SALVAGE_FAULT_SKIP=N lets the point pass N times before it fires (to kill mid-run).
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset({"after_claim", "after_fetch", "in_commit", "after_commit"})

_passes: dict[str, int] = {}


def _configured() -> str:
    value = os.environ.get("SALVAGE_FAULT_POINT")
    if value is None:
        try:
            from django.conf import settings

            value = getattr(settings, "SALVAGE_FAULT_POINT", "")
        except Exception:  # settings not configured: a pure unit test, stay inert
            value = ""
    return value or ""


def point(name: str) -> None:
    """Kill this process with SIGKILL (no cleanup, no atexit, no rollback by us) when armed."""
    # Other modules may add their own points (recovery.remote does); POINTS lists the engine's.
    if _configured() != name:
        return
    skip = int(os.environ.get("SALVAGE_FAULT_SKIP", "0") or 0)
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] <= skip:
        return
    once = os.environ.get("SALVAGE_FAULT_ONCE")
    if once:
        try:
            # O_EXCL: exactly one process in the whole test wins the right to die.
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{os.getpid()} {name}\n".encode())
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
