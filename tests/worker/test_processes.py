"""recovery.ops.processes: children in their own groups, stopped cleanly, stragglers killed."""

from __future__ import annotations

import os
import sys

import pytest

from recovery.ops.processes import Supervisor, wait_until

pytestmark = pytest.mark.worker

# A child that forks a grandchild, writes both pids, and exits on SIGTERM.
POLITE = """
import os, signal, sys, time
pid = os.fork()
if pid == 0:
    time.sleep(600)
    os._exit(0)
open(sys.argv[1], "w").write(f"{os.getpid()} {pid}")
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep(600)
"""

STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(600)
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); /proc says whether it is one.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].startswith("Z")
    except FileNotFoundError:
        return True


def test_it_stops_a_child_and_its_grandchildren(tmp_path):
    marker = tmp_path / "pids"
    with Supervisor(grace=10, log_dir=tmp_path) as supervisor:
        child = supervisor.start("polite", [sys.executable, "-c", POLITE, str(marker)])
        wait_until(lambda: marker.exists() and marker.read_text(), timeout=30, what="pids")
        parent_pid, grandchild_pid = map(int, marker.read_text().split())
        assert child.pid == parent_pid
        assert os.getpgid(grandchild_pid) == child.pid  # its own group, not ours
        assert os.getpgid(child.pid) != os.getpgid(0)
    assert child.popen.returncode == 0
    wait_until(lambda: gone(grandchild_pid), timeout=10, what="grandchild gone")


def test_it_kills_a_child_that_ignores_sigterm_after_the_grace(tmp_path):
    marker = tmp_path / "pid"
    supervisor = Supervisor(grace=1, log_dir=tmp_path)
    child = supervisor.start("stubborn", [sys.executable, "-c", STUBBORN, str(marker)])
    wait_until(lambda: marker.exists() and marker.read_text(), timeout=30, what="pid")
    supervisor.stop_all()
    assert child.popen.returncode == -9
    assert not child.group_alive()
