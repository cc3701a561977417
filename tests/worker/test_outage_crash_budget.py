"""A database outage is not a crash: a `work` process that rides out an outage longer than its
leases comes back, gives back the leases it held and commits its tasks with crash_count 0.

Before, the expired leases were taken over after the outage (by the same worker) and each
counted one crash against SALVAGE_CRASH_BUDGET, so a few outages quarantined healthy pages as
worker_crash_loop. The outage is tests/worker/test_database_outage.py's (PostgreSQL).
"""

from __future__ import annotations

import time

import pytest

from recovery.leases import crashes
from recovery.models import Attempt, Task
from tests.support.engine_procs import Procs, log_text, wait_exit, wait_for
from tests.support.factories import make_dataset, make_run, make_tasks
from tests.worker.test_database_outage import database_outage

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

WORK = (
    "import tests.worker.slow_provider; from django.core.management import call_command; "
    "call_command('work', '--batch', '3', '--worker-id', 'rides-out')"
)
LEASE = 2


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_a_worker_that_rides_out_an_outage_longer_than_its_lease_counts_no_crash(
    postgres_only, procs, tmp_path
):
    run = make_run(make_dataset(provider="slow_test", lease_seconds=LEASE))
    make_tasks(run, 6)
    gate = tmp_path / "pages-arrive"
    proc = procs.python(
        "work", WORK, SLOW_PROVIDER_GATE=str(gate), SALVAGE_DB_RETRY_CAP="1",
        SALVAGE_HEARTBEAT_SECONDS="1",
    )  # fmt: skip
    wait_for(
        lambda: Task.objects.filter(run=run, lease_owner="rides-out").count() == 3,
        timeout=90,
        what="the first batch to be claimed",
    )
    with database_outage():
        gate.touch()  # the pages arrive; the commit meets the outage
        wait_for(
            lambda: "work: database unavailable" in log_text(proc),
            timeout=60,
            what="the worker to notice the outage",
        )
        time.sleep(3 * LEASE)  # the outage outlasts every lease the worker held
    wait_for(
        lambda: Task.objects.filter(run=run, state="committed").count() == 6,
        timeout=120,
        what="every task committed after the outage",
    )
    assert proc.poll() is None, log_text(proc)
    tasks = Task.objects.filter(run=run)
    assert list(tasks.values_list("crash_count", flat=True)) == [0] * 6, log_text(proc)
    # The three leases it held stay traceable as lost, given back, no crash-loop evidence.
    lost = Attempt.objects.filter(run=run, outcome="lost_lease")
    assert lost.count() == 3
    assert all(a.error_detail.startswith(crashes.OUTAGE_PREFIX) for a in lost)
    assert all(crashes.evidence(t.pk) == [] for t in tasks)
    procs.stop(proc)
    assert wait_exit(proc, 60, "the worker") == 0
    assert "Traceback" not in log_text(proc)
