"""A stop signal never hangs a command, wherever in its wait it lands."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Runs in its own interpreter: the signal handlers are process-wide, and a hang must end in a
# failure (the timeout), not in a stuck test session.
SCRIPT = textwrap.dedent(
    """
    import os, signal, threading
    from recovery.ops import stopping

    stop = threading.Event()
    stopping.stop_on_signals(stop)
    # Event.wait holds the event's lock between checking the flag and sleeping: deliver the
    # signal exactly there (a handler that sets the event itself waits for ever on that lock).
    with stop._cond:
        os.kill(os.getpid(), signal.{sig})
        assert not stop.is_set()
    assert stop.wait(10), "the stop request never arrived"
    print("stopped")
    """
)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_landing_inside_the_events_wait_stops_the_loop(sig):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(sig=sig)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
