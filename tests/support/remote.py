"""Helpers for the asynchronous-provider tests: simulators on real sockets, datasets, scans,
and the `manage.py work` processes the crash tests kill around a remote job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from django.db import connection

from recovery.models import Dataset
from recovery.sandbox.runner import Served, start_in_thread
from tests.support.factories import DEFAULT_SPEC, make_dataset

ROOT = Path(__file__).resolve().parents[2]
MESSORA_KEY = "sandbox-messora-key"
MESSORA_OTHER_KEY = "sandbox-messora-other"


def serve(module, **options):
    """Start a simulator sub-app on a free loopback port; returns (served, state)."""
    app = module.make_app(**options)
    served = start_in_thread(app)
    return served, app[module.STATE]


@dataclass
class Simulator:
    """A provider's simulator on a real socket, and the settings that point Salvage at it."""

    served: Served
    state: Any  # the simulator's own state object: its fault switches and counters
    settings: dict[str, str]  # the URL and credential settings, by name

    def stats(self) -> dict:
        return stats(self.served)

    def env(self, **extra: str) -> dict[str, str]:
        """A `manage.py work` child's environment: these settings, and remote-job leases short
        enough that a killed worker's job is reaped within the test's deadline."""
        return {**self.settings, "SALVAGE_REMOTE_LEASE_SECONDS": "2", **extra}


def simulator_fixture(
    module: ModuleType, *, url: str, secrets: dict[str, str], **options: Any
) -> Callable[..., Iterator[Simulator]]:
    """A fixture serving `module`'s simulator with `options`; the test process's settings name
    its URL (setting `url`) and the `secrets`, and the Simulator carries both to children."""

    @pytest.fixture
    def simulator(settings) -> Iterator[Simulator]:
        served, state = serve(module, **options)
        values = {url: served.base_url, **secrets}
        for name, value in values.items():
            setattr(settings, name, value)
        yield Simulator(served, state, values)
        served.stop()

    return simulator


def remote_dataset(provider: str, **provider_options) -> Dataset:
    dataset = make_dataset(provider=provider)
    spec = dict(DEFAULT_SPEC, name=dataset.name, provider=provider)
    spec["provider_options"] = provider_options
    Dataset.objects.filter(pk=dataset.pk).update(spec=spec, provider=provider)
    dataset.refresh_from_db()
    return dataset


# How long a test waits for a freshly started `manage.py work` process to boot and act: a
# Django start alone takes tens of seconds on a loaded 2-core CI box (load average past 20).
PROCESS_DEADLINE = 120


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stats(served) -> dict:
    return httpx.get(f"{served.base_url}/_sim/stats", timeout=5).json()


def database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


def start_work(worker_id: str, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """A real `manage.py work` process (the engine's loop, with recovery.remote's step)."""
    full = dict(os.environ)
    full.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url(),
            "SALVAGE_INSECURE_DEV_KEY": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    full.update(env)
    # The child holds its own descriptor of the log; the parent's copy closes at once.
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "manage.py", "work", "--worker-id", worker_id],
            cwd=ROOT,
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class RemoteWorkers:
    """`manage.py work` processes writing to one log, which the tests search for credentials;
    any still running at teardown are stopped (the `remote_workers` fixture)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.started: list[subprocess.Popen] = []

    def start(self, worker_id: str, env: dict[str, str]) -> subprocess.Popen:
        proc = start_work(worker_id, env, self.log_path)
        self.started.append(proc)
        return proc

    @contextmanager
    def running(self, worker_id: str, env: dict[str, str]) -> Iterator[subprocess.Popen]:
        """A worker for the length of the block, stopped on the way out (SIGTERM, then KILL)."""
        proc = self.start(worker_id, env)
        try:
            yield proc
        finally:
            stop_worker(proc)

    def log_text(self) -> str:
        return self.log_path.read_text()

    def stop_all(self) -> None:
        for proc in self.started:
            stop_worker(proc)


def scan_database_for(secrets: list[str]) -> list[str]:
    """Every text of every row of every table, searched for each secret (guarantee 11)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')
            for row in cursor.fetchall():
                text = json.dumps([str(v) for v in row])
                for secret in secrets:
                    if secret in text:
                        found.append(f"{table}: {text[:200]}")
    return found
