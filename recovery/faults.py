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
file), so a respawned django-q2 worker or a second `work` process carries on normally;
SALVAGE_FAULT_TIMES=N with it allows N kills in all (files /path, /path.2, ... /path.N).
SALVAGE_FAULT_SKIP=N lets the point pass N times before it fires (to kill mid-run).
SALVAGE_FAULT_URL=text makes it a page's fault: the point fires only when a URL the process is
working on at that point ends with `text` (a poison page that kills every worker it meets).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

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


def point(name: str, urls: Iterable[str] | None = None) -> None:
    """Kill this process with SIGKILL (no cleanup, no atexit, no rollback by us) when armed.

    `urls`: the pages the process holds at this point, for SALVAGE_FAULT_URL (a point called
    without them never fires for a page's fault)."""
    # Other modules may add their own points (recovery.remote does); POINTS lists the engine's.
    if _configured() != name:
        return
    page = os.environ.get("SALVAGE_FAULT_URL")
    if page and not any(url.endswith(page) for url in urls or ()):
        return
    skip = int(os.environ.get("SALVAGE_FAULT_SKIP", "0") or 0)
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] <= skip:
        return
    once = os.environ.get("SALVAGE_FAULT_ONCE")
    if once and not _win_a_kill(once, name):
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _win_a_kill(once: str, name: str) -> bool:
    times = max(1, int(os.environ.get("SALVAGE_FAULT_TIMES", "1") or 1))
    for n in range(1, times + 1):
        path = once if n == 1 else f"{once}.{n}"
        try:
            # O_EXCL: exactly one process in the whole test wins each right to die.
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, f"{os.getpid()} {name}\n".encode())
        os.close(fd)
        return True
    return False
