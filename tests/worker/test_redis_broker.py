"""The Redis broker is at-most-once: a killed worker's wake-up is gone for good. The work is
not, because the dispatcher re-sends wake-ups while due tasks stay unclaimed."""

from __future__ import annotations

import os

import pytest

from tests.support.engine_procs import (
    STALL,
    Procs,
    all_terminal,
    assert_each_task_done_once,
    log_text,
    wait_for,
)
from tests.support.factories import make_run, make_tasks

pytestmark = [
    pytest.mark.worker,
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_a_killed_workers_lost_wakeup_is_resent_and_every_task_finishes(redis_url, procs, tmp_path):
    import redis

    run = make_run()
    make_tasks(run, 30)
    name = f"engine-test-{os.getpid()}"  # our own queue key on the shared Redis
    env = {
        "REDIS_URL": redis_url,
        "SALVAGE_Q_NAME": name,
        "SALVAGE_Q_WORKERS": "2",
        # Two live workers at once: sized from STALL so that on a loaded box neither takes over
        # the other's batch nor gets killed by the timeout, which the exact count below forbids.
        "SALVAGE_LEASE_SECONDS": str(STALL),
        "SALVAGE_Q_TIMEOUT": str(2 * STALL),
        "SALVAGE_Q_RETRY": str(3 * STALL),
    }
    fired = tmp_path / "fault-fired"
    try:
        cluster = procs.manage(
            "qcluster",
            "qcluster",
            SALVAGE_FAULT_POINT="after_claim",
            SALVAGE_FAULT_ONCE=str(fired),
            **env,
        )
        dispatcher = procs.manage("dispatch", "dispatch", "--tick", "0.2", "--batch", "10", **env)
        wait_for(
            lambda: fired.exists() and all_terminal(run.pk),
            timeout=240,
            what=f"every task terminal after the kill\n{log_text(cluster)[-3000:]}",
        )
        assert procs.stop(dispatcher) == 0
        procs.stop(cluster)
    finally:
        redis.Redis.from_url(redis_url).delete(f"django_q:{name}:q")
    outcomes = assert_each_task_done_once(run.pk, 30)
    assert outcomes["lost_lease"] == 10  # the killed batch, traced by the takeover
