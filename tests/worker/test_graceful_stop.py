"""SIGTERM lets the current step (claim -> execute -> commit) finish, then `work` exits 0."""

from __future__ import annotations

import os
import signal

import pytest

from recovery.models import Task
from tests.support.engine_procs import Procs, log_text, wait_exit, wait_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

WORK = (
    "import tests.worker.slow_provider; from django.core.management import call_command; "
    "call_command('work', '--batch', '3', '--worker-id', 'graceful')"
)


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_finishes_the_current_batch_and_starts_no_other(sig, procs, tmp_path):
    run = make_run(make_dataset(provider="slow_test", lease_seconds=30))
    make_tasks(run, 6)
    gate = tmp_path / "pages-arrive"
    proc = procs.python("work", WORK, SLOW_PROVIDER_GATE=str(gate))
    wait_for(
        lambda: Task.objects.filter(run=run, lease_owner="graceful").count() == 3,
        timeout=90,
        what="the first batch to be claimed",
    )
    os.kill(proc.pid, sig)
    gate.touch()  # the batch in flight completes after the signal
    assert wait_exit(proc, 90, "the worker") == 0, log_text(proc)
    states = sorted(Task.objects.filter(run=run).values_list("state", flat=True))
    assert states == ["committed"] * 3 + ["pending"] * 3
    assert (
        "1 batches, 3 claims, 3 attempts (0 to retry), 0 lost leases; tasks ended: 3 committed"
        in log_text(proc)
    )
