"""Helpers for the engine's real-process tests: start workers on the test database, kill
their process groups, and check the end state every crash test must reach."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from django.db import connection

from recovery import counters
from recovery.models import Attempt, Observation, Task

ROOT = Path(__file__).resolve().parent.parent.parent

# Seconds a live process may go without a CPU on a loaded 2-core CI box (load average past 20)
# and still not be judged dead. A test where live workers compete sizes their leases (and
# django-q2's timeout) from it; the 2 s default lease is only safe with one live worker.
STALL = 10


def database_url() -> str:
    """The test database as a URL, so child processes open the same database."""
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in (
        "SALVAGE_FAULT_POINT",
        "SALVAGE_FAULT_ONCE",
        "SALVAGE_FAULT_SKIP",
        "SALVAGE_FAULT_URL",
        "SALVAGE_FAULT_TIMES",
    ):
        env.pop(name, None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url(),
            "SALVAGE_INSECURE_DEV_KEY": "1",
            "PYTHONUNBUFFERED": "1",
            # Short leases across processes: a killed worker's tasks come back in 2 s.
            "SALVAGE_LEASE_SECONDS": "2",
        }
    )
    env.update(extra)
    return env


class Procs:
    """Child processes, each in its own session; every group is SIGKILLed at teardown."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.children: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (closed with the test)
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log_file = log  # type: ignore[attr-defined]
        proc.log_path = self.log_dir / f"{name}.log"  # type: ignore[attr-defined]
        self.children.append(proc)
        return proc

    def manage(self, name: str, *args: str, **env: str) -> subprocess.Popen:
        return self.start(name, [sys.executable, "manage.py", *args], child_env(**env))

    def python(self, name: str, code: str, **env: str) -> subprocess.Popen:
        boot = "import django; django.setup(); "
        return self.start(name, [sys.executable, "-c", boot + code], child_env(**env))

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 20) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        # A django-q2 cluster forks workers into the same group: make sure none survives.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode

    def close(self) -> None:
        for proc in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            proc.log_file.close()


def log_text(proc: subprocess.Popen) -> str:
    proc.log_file.flush()
    return Path(proc.log_path).read_text(errors="replace")


def wait_for(predicate, *, timeout: float, what: str, interval: float = 0.1):
    """Poll until `predicate()` is truthy; the box is shared, so deadlines are generous."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_exit(proc: subprocess.Popen, timeout: float, what: str) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{what} did not exit within {timeout:.0f} s") from None


def all_terminal(run_id: int) -> bool:
    return not Task.objects.filter(
        run_id=run_id, state__in=["pending", "leased", "retry_wait"]
    ).exists()


def assert_each_task_done_once(run_id: int, n_tasks: int) -> dict[str, int]:
    """Every task committed exactly once, one observation per task, counters exact, and no
    lease token used by two attempts (a token is one lease: two attempts on one token would
    mean two workers held the same lease)."""
    tasks = Task.objects.filter(run_id=run_id)
    assert tasks.count() == n_tasks
    assert dict(Counter(tasks.values_list("state", flat=True))) == {"committed": n_tasks}
    assert Observation.objects.filter(run_id=run_id).count() == n_tasks
    assert (
        Observation.objects.filter(run_id=run_id).values("source_task_id").distinct().count()
        == n_tasks
    )
    attempts = Attempt.objects.filter(run_id=run_id)
    committed = Counter(attempts.filter(outcome="committed").values_list("task_id", flat=True))
    assert len(committed) == n_tasks and set(committed.values()) == {1}
    assert attempts.count() >= n_tasks
    tokens = Counter(attempts.exclude(outcome="lost_lease").values_list("task_id", "lease_token"))
    assert max(tokens.values()) == 1, "two attempts committed under one lease token"
    assert counters.by_state(run_id) == {"committed": n_tasks}
    return dict(Counter(attempts.values_list("outcome", flat=True)))
