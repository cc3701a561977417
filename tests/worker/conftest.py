"""Fixtures shared by the worker tier's suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.remote import RemoteWorkers


@pytest.fixture
def remote_workers(tmp_path) -> Iterator[RemoteWorkers]:
    """The remote-job suites' `manage.py work` processes (one log: tmp_path/workers.log)."""
    workers = RemoteWorkers(tmp_path / "workers.log")
    yield workers
    workers.stop_all()
