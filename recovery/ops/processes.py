"""A small process supervisor for the demo, the drill and the worker tests.

Each child runs in its own session (so its own process group): a terminal's Ctrl-C reaches only
the supervisor, which forwards SIGINT/SIGTERM to every group, waits a grace period and SIGKILLs
the stragglers. Killing a group (not a pid) also reaches a child's own children, such as the
worker processes a django-q2 cluster forks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

BASE_DIR = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port free right now (a child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage_py(*args: str) -> list[str]:
    """argv that runs `manage.py <args>` with this interpreter."""
    return [sys.executable, str(BASE_DIR / "manage.py"), *args]


def wait_until(
    condition: Callable[[], object], *, timeout: float, interval: float = 0.2, what: str = ""
) -> object:
    """Poll `condition` until it returns something truthy; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what or condition}")
        time.sleep(interval)


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when `url` answers with a status below 500 (a login redirect counts as up)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):
        return False


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None
    cwd: str | None
    log_path: Path | None
    popen: subprocess.Popen
    started_at: float = field(default_factory=time.monotonic)
    _log: IO | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal_group(self, sig: int) -> bool:
        """Send `sig` to the child's whole process group; False if it is already gone."""
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def group_alive(self) -> bool:
        """True while any process of the child's group exists (forked grandchildren too)."""
        try:
            os.killpg(self.popen.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        # A zombie leader keeps the group "alive" until reaped.
        self.popen.poll()
        try:
            os.killpg(self.popen.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


class Supervisor:
    """Start, watch and stop child processes, each in its own process group.

    Use as a context manager: leaving the block (normally, by exception or by Ctrl-C) stops
    every child: SIGTERM (or the given signal) first, SIGKILL after `grace` seconds.
    """

    def __init__(
        self, *, grace: float = 15.0, log_dir: Path | None = None, echo: Callable | None = None
    ):
        self.grace = grace
        self.log_dir = log_dir
        self.echo = echo or (lambda message: None)
        self.children: dict[str, Child] = {}

    # --- starting ---------------------------------------------------------------------------
    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        stdout: int | IO | None = None,
    ) -> Child:
        """Start `argv` in a new session. Output goes to `stdout`, else `<log_dir>/<name>.log`."""
        if name in self.children and self.children[name].alive():
            raise RuntimeError(f"child {name!r} is already running")
        log_handle = None
        log_path = None
        if stdout is None and self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
            log_handle = open(log_path, "ab")  # noqa: SIM115 (closed when the child is reaped)
            stdout = log_handle
        popen = subprocess.Popen(
            list(argv),
            env=env,
            cwd=str(cwd) if cwd else None,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            start_new_session=True,
        )
        child = Child(name, list(argv), env, str(cwd) if cwd else None, log_path, popen)
        child._log = log_handle
        self.children[name] = child
        self.echo(f"started {name} (pid {popen.pid})")
        return child

    def restart(self, name: str) -> Child:
        old = self.children[name]
        self.stop(name)
        return self.start(name, old.argv, env=old.env, cwd=old.cwd)

    # --- watching ---------------------------------------------------------------------------
    def exited(self) -> list[Child]:
        """Children whose main process has exited (not yet removed)."""
        return [child for child in self.children.values() if not child.alive()]

    def alive_names(self) -> list[str]:
        return [name for name, child in self.children.items() if child.alive()]

    # --- stopping ---------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        """SIGKILL a child's whole group now (a crash, for tests and the drill)."""
        child = self.children[name]
        child.signal_group(signal.SIGKILL)
        child.popen.wait()
        self._close(child)

    def stop(self, name: str, sig: int = signal.SIGTERM, grace: float | None = None) -> int | None:
        self._stop([self.children[name]], sig, self.grace if grace is None else grace)
        return self.children[name].popen.returncode

    def stop_all(self, sig: int = signal.SIGTERM, grace: float | None = None) -> None:
        # Reverse start order: the web server and workers stop before the sandbox they use.
        self._stop(
            list(reversed(self.children.values())), sig, self.grace if grace is None else grace
        )

    def _stop(self, children: list[Child], sig: int, grace: float) -> None:
        try:
            self._stop_gracefully(children, sig, grace)
        except KeyboardInterrupt:
            # A second Ctrl-C while waiting: stop waiting, kill everything now.
            for child in children:
                child.signal_group(signal.SIGKILL)
                self._close(child)
            raise

    def _stop_gracefully(self, children: list[Child], sig: int, grace: float) -> None:
        # The signal goes to each group's leader first: qcluster and gunicorn stop their own
        # workers in order (signalling a cluster's workers directly makes its sentinel respawn
        # them). Whatever is left of a group after the leader exits gets the signal next,
        # and SIGKILL once the grace period is over.
        for child in children:
            if child.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, sig)
        deadline = time.monotonic() + grace
        for child in children:
            while child.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if child.group_alive():
                child.signal_group(sig)
                leftovers = min(deadline, time.monotonic() + 2.0)
                while child.group_alive() and time.monotonic() < leftovers:
                    time.sleep(0.05)
            if child.group_alive():
                self.echo(f"{child.name} did not stop within {grace:.0f} s: killing it")
                child.signal_group(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=5)
            self._close(child)

    def _close(self, child: Child) -> None:
        if child._log is not None:
            child._log.close()
            child._log = None

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop_all()


@contextlib.contextmanager
def forward_signals() -> Iterator[dict]:
    """Turn SIGTERM (and SIGINT) into KeyboardInterrupt inside the block.

    The supervisor's children live in their own process groups, so a terminal's Ctrl-C or a
    service manager's SIGTERM reaches only us; raising here unwinds into `Supervisor.__exit__`,
    which forwards the stop to every child. The dict records which signal arrived.
    """
    received: dict = {}

    def handler(signum, frame):
        received["signal"] = signum
        raise KeyboardInterrupt

    previous = {
        sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
