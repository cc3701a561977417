"""SIGTERM and SIGINT as a stop request for a long-running command's loop.

Python runs a signal handler on the main thread between two bytecodes, and that can be inside
`Event.wait` while the thread holds the event's own lock: an `Event.set()` called from the
handler would then wait for that lock for ever (the command hangs instead of stopping). The
handler hands the set to a short-lived thread, which gets the lock as soon as the main
thread's wait lets it go.
"""

from __future__ import annotations

import signal
import threading


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM or SIGINT sets `stop`: the loop finishes its current step and exits 0."""

    def request_stop(signum, frame) -> None:
        threading.Thread(target=stop.set, name="stop-request", daemon=True).start()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
