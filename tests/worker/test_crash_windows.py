"""Seed 002's crash windows, with real worker processes SIGKILLed at each point.

Every test ends the same way: each task committed exactly once, one observation per task,
exact counters, and the killed attempt traceable. The kill comes from recovery.faults
(SALVAGE_FAULT_POINT), i.e. SIGKILL of the worker process itself: no cleanup, no rollback by
us, the database alone decides what survived.
"""

from __future__ import annotations

import signal

import pytest
from django.db import connection
from django_q.models import OrmQ

from recovery.models import Attempt, Observation, Task
from tests.support.engine_procs import (
    STALL,
    Procs,
    all_terminal,
    assert_each_task_done_once,
    log_text,
    wait_exit,
    wait_for,
)
from tests.support.factories import make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

POINTS = ["after_claim", "after_fetch", "in_commit", "after_commit"]
N_TASKS = 30
BATCH = 10


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def what_the_kill_left(run_id: int, point: str, victim: str, pipelined: bool) -> int:
    """Checks what the kill left; returns how many leases the victim still held.

    A pipelined `work` (PostgreSQL: recovery.commit_lane) claims and runs the next batch while
    a batch commits, so a kill in or after the commit may also leave that next batch leased."""
    leased = Task.objects.filter(run_id=run_id, state="leased", lease_owner=victim).count()
    committed = Task.objects.filter(run_id=run_id, state="committed").count()
    attempts = Attempt.objects.filter(run_id=run_id).count()
    observations = Observation.objects.filter(run_id=run_id).count()
    next_batch = (0, BATCH) if pipelined and point in ("in_commit", "after_commit") else (0,)
    if point == "after_commit":
        # The batch is durable: committed before the process died.
        assert (committed, attempts, observations) == (BATCH, BATCH, BATCH)
        assert leased in next_batch
    else:
        # Before COMMIT (including inside the open transaction): nothing but the leases.
        assert (committed, attempts, observations) == (0, 0, 0)
        assert leased - BATCH in next_batch
    return leased


@pytest.mark.parametrize("point", POINTS)
def test_a_work_process_killed_at_the_point_loses_and_duplicates_nothing(point, procs):
    run = make_run()
    make_tasks(run, N_TASKS)
    victim = procs.manage(
        "victim",
        "work",
        "--batch",
        str(BATCH),
        "--until-idle",
        "--worker-id",
        "victim",
        SALVAGE_FAULT_POINT=point,
    )
    assert wait_exit(victim, 120, "the victim") == -signal.SIGKILL, log_text(victim)
    held = what_the_kill_left(run.pk, point, "victim", pipelined=connection.vendor == "postgresql")

    rescuer = procs.manage(
        "rescuer", "work", "--batch", str(BATCH), "--until-idle", "--worker-id", "rescuer"
    )
    assert wait_exit(rescuer, 180, "the rescuer") == 0, log_text(rescuer)
    outcomes = assert_each_task_done_once(run.pk, N_TASKS)
    # The victim's attempts are traced by the takeover of their expired leases.
    assert outcomes == (
        {"committed": N_TASKS, "lost_lease": held} if held else {"committed": N_TASKS}
    )
    if held:
        traced = Attempt.objects.filter(run_id=run.pk, outcome="lost_lease")
        assert set(traced.values_list("worker", flat=True)) == {"victim"}


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS)
def test_a_qcluster_worker_killed_at_the_point_loses_and_duplicates_nothing(point, procs, tmp_path):
    run = make_run()
    make_tasks(run, N_TASKS)
    fired = tmp_path / "fault-fired"
    # Two live workers run at once here, so on a loaded box (load average past 20) neither
    # may be judged dead while it merely waits for a CPU: a 2 s lease let one take over the
    # other's batch (an extra lost_lease), and a 5 s django-q2 timeout killed a slow batch
    # (a second death). Both are sized from STALL; the dead worker's batch comes back after
    # one lease, its queue item after `retry`.
    cluster = procs.manage(
        "qcluster",
        "qcluster",
        SALVAGE_FAULT_POINT=point,
        SALVAGE_FAULT_ONCE=str(fired),  # only the first worker to reach the point dies
        SALVAGE_LEASE_SECONDS=str(STALL),
        SALVAGE_Q_WORKERS="2",
        SALVAGE_Q_TIMEOUT=str(2 * STALL),
        SALVAGE_Q_RETRY=str(3 * STALL),
    )
    dispatcher = procs.manage("dispatch", "dispatch", "--tick", "0.2", "--batch", str(BATCH))
    wait_for(
        lambda: fired.exists() and all_terminal(run.pk),
        timeout=240,
        what=f"the kill at {point} and every task terminal\n{log_text(cluster)[-3000:]}",
    )
    # The killed worker's queue item is redelivered after `retry` and must find nothing to
    # redo (after_commit: commit first, acknowledge second); every wake-up gets acknowledged.
    wait_for(lambda: not OrmQ.objects.exists(), timeout=240, what="the queue to drain")
    assert procs.stop(dispatcher) == 0
    procs.stop(cluster)
    assert fired.read_text().split()[1] == point
    assert "reincarnated" in log_text(cluster) or "died" in log_text(cluster).lower()
    outcomes = assert_each_task_done_once(run.pk, N_TASKS)
    if point == "after_commit":
        assert outcomes == {"committed": N_TASKS}
    else:
        assert outcomes["lost_lease"] == BATCH
