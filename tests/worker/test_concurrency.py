"""Several real worker processes draining one run: every task committed exactly once.

PostgreSQL: 4 processes (SKIP LOCKED claims); SQLite: 2 processes (BEGIN IMMEDIATE claims).
Leases are 2 s, so on a loaded machine some leases expire mid-batch: the fencing must turn
those late commits into lost_lease attempts, never into a second observation.
"""

from __future__ import annotations

import pytest
from django.db import connection

from recovery.models import WorkerHeartbeat
from tests.support.engine_procs import Procs, assert_each_task_done_once, log_text, wait_exit
from tests.support.factories import make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


@pytest.mark.parametrize(
    "n_tasks", [2_000, pytest.param(20_000, marks=pytest.mark.slow)], ids=["2k", "20k"]
)
def test_worker_processes_commit_every_task_exactly_once(n_tasks, procs):
    n_workers = 4 if connection.vendor == "postgresql" else 2
    run = make_run()
    make_tasks(run, n_tasks)
    workers = [
        procs.manage(f"w{i}", "work", "--batch", "50", "--until-idle", "--worker-id", f"w{i}")
        for i in range(n_workers)
    ]
    for i, proc in enumerate(workers):
        assert wait_exit(proc, 900, f"worker w{i}") == 0, log_text(proc)
    assert_each_task_done_once(run.pk, n_tasks)
    beats = {b.worker: b for b in WorkerHeartbeat.objects.all()}
    assert set(beats) == {f"w{i}" for i in range(n_workers)}
    assert sum(b.committed for b in beats.values()) == n_tasks
