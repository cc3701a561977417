"""A stale worker: its lease expires while it is stalled, another worker claims and commits,
and the stale worker's heartbeat and commit are both refused and leave no observation."""

from __future__ import annotations

import os
import signal
import time

import pytest

from recovery import leases, worker
from recovery.models import Attempt, Observation, Task
from tests.support.engine_procs import STALL, Procs, log_text, wait_exit, wait_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LOOP = (
    "import tests.worker.slow_provider; from recovery import worker; "
    "print(worker.run_until_idle({wid!r}, idle_wait=0))"
)


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_a_stalled_workers_heartbeat_and_commit_are_refused(procs, tmp_path):
    run = make_run(make_dataset(provider="slow_test", lease_seconds=2))
    (task,) = make_tasks(run, 1)
    gate = tmp_path / "page-arrives"
    slow = procs.python("slow", LOOP.format(wid="slow"), SLOW_PROVIDER_GATE=str(gate))
    wait_for(
        lambda: Task.objects.filter(pk=task.pk, lease_owner="slow").exists(),
        timeout=90,
        what="the slow worker's claim",
    )
    # Stall it (a GC pause, a frozen VM): no heartbeat while stopped, so the lease runs out by
    # the database's clock.
    os.killpg(slow.pid, signal.SIGSTOP)
    try:
        wait_for(worker.has_due_work, timeout=60, what="the lease to expire")
        fast = procs.python("fast", LOOP.format(wid="fast"))
        assert wait_exit(fast, 120, "the fast worker") == 0, log_text(fast)
        assert Task.objects.get(pk=task.pk).state == "committed"
    finally:
        os.killpg(slow.pid, signal.SIGCONT)
    wait_for(
        lambda: "heartbeat refused" in log_text(slow),
        timeout=60,
        what=f"the stale heartbeat to be refused\n{log_text(slow)[-2000:]}",
    )
    gate.touch()  # the stale worker's page arrives now; it tries to commit it
    assert wait_exit(slow, 120, "the slow worker") == 0, log_text(slow)

    task.refresh_from_db()
    assert (task.state, task.lease_owner, task.attempt_count) == ("committed", "", 2)
    observation = Observation.objects.get(run=run)
    assert observation.payload == {"pid": fast.pid}
    assert Attempt.objects.get(pk=observation.source_attempt_id).worker == "fast"
    mine = Attempt.objects.filter(task=task, worker="slow")
    assert set(mine.values_list("outcome", flat=True)) == {"lost_lease"}
    details = mine.values_list("error_detail", flat=True)
    assert any(d.startswith("lost lease: token") for d in details)  # the refused commit
    assert Attempt.objects.filter(task=task, outcome="committed").count() == 1


def test_heartbeats_keep_a_long_task_leased_past_its_lease_length(procs):
    # A page that takes 1.5 leases: without heartbeats another worker would take it over after
    # one (and the long page would livelock, re-claimed for ever). The lease is STALL, not 2 s:
    # a live worker that waits over 2 s for a CPU on a loaded box misses its heartbeat (every
    # lease/3) by no fault of the heartbeat, and the intruder below took the page over.
    run = make_run(make_dataset(provider="slow_test", lease_seconds=STALL))
    (task,) = make_tasks(run, 1)
    slow = procs.python("slow", LOOP.format(wid="slow"), SLOW_PROVIDER_SLEEP=str(1.5 * STALL))
    wait_for(
        lambda: Task.objects.filter(pk=task.pk, lease_owner="slow").exists(),
        timeout=90,
        what="the slow worker's claim",
    )
    intruder_claims = 0
    deadline = time.monotonic() + 120
    while slow.poll() is None and time.monotonic() < deadline:
        intruder_claims += len(leases.claim("intruder"))
        time.sleep(0.2)
    assert slow.returncode == 0, log_text(slow)
    assert intruder_claims == 0
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == ("committed", 1)
    assert list(Attempt.objects.filter(task=task).values_list("worker", "outcome")) == [
        ("slow", "committed")
    ]
