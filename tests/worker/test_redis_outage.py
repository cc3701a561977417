"""With Redis as django-q2's broker, qcluster and dispatch ride out a Redis restart and give up
past the limit, like a database outage (recovery.ops.outage, recovery.ops.qcluster_outage).

The Redis is the test's own (tests/worker/outage_servers.py): a redis-server on its own port,
stopped and started again by the test; the shared one on 6379 is never touched.
"""

from __future__ import annotations

import time

import pytest

from recovery.models import Task
from recovery.ops.processes import Supervisor, manage_py, wait_until
from tests.support.engine_procs import all_terminal, assert_each_task_done_once, child_env
from tests.support.factories import make_run, make_tasks
from tests.worker.outage_servers import PrivateRedis, private_redis

pytestmark = [
    pytest.mark.worker,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


def redis_env(url: str, **extra: str) -> dict[str, str]:
    return child_env(
        REDIS_URL=url,
        SALVAGE_Q_WORKERS="2",
        SALVAGE_Q_TIMEOUT="10",
        SALVAGE_Q_RETRY="60",
        SALVAGE_DB_RETRY_CAP="1",
        SALVAGE_HEARTBEAT_SECONDS="1",
        SALVAGE_Q_LOG_LEVEL="INFO",  # the cluster's "running." line
        **extra,
    )


def says(proc, text: str) -> bool:
    return text in proc.log_path.read_text(errors="replace")


def test_qcluster_and_dispatch_ride_out_a_redis_restart_and_finish_the_run_once(tmp_path):
    run = make_run()
    with private_redis(tmp_path) as redis_server:
        env = redis_env(redis_server.url)
        with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
            cluster = supervisor.start("qcluster", manage_py("qcluster"), env=env)
            dispatch = supervisor.start(
                "dispatch", manage_py("dispatch", "--tick", "0.2", "--batch", "10"), env=env
            )
            wait_until(lambda: says(cluster, "running."), timeout=60, what="the cluster")
            make_tasks(run, 20)
            wait_until(lambda: all_terminal(run.pk), timeout=120, what="the first tasks")

            redis_server.stop()
            # Written while Redis is down: the dispatcher cannot send their wake-ups.
            make_tasks(run, 40)
            wait_until(
                lambda: (
                    says(cluster, "qcluster: Redis broker unavailable")
                    and says(dispatch, "dispatch: Redis broker unavailable")
                ),
                timeout=30,
                what="both processes noticing the outage",
            )
            time.sleep(3)  # the outage goes on: both must keep running through it
            assert cluster.alive() and dispatch.alive()
            assert Task.objects.filter(run=run, state="committed").count() == 20

            redis_server.start()  # empty: the wake-ups it held are gone (at-most-once)
            wait_until(lambda: all_terminal(run.pk), timeout=120, what="the run after the outage")
            # The run can finish before a guard's next probe (up to the 1 s backoff cap, more
            # on a loaded box): wait for each line rather than stop the processes first.
            for proc in (cluster, dispatch):
                wait_until(
                    lambda p=proc: says(p, f"{p.name}: Redis broker available again"),
                    timeout=30,
                    what=f"{proc.name} seeing Redis back",
                )
            assert cluster.alive() and dispatch.alive()
    assert_each_task_done_once(run.pk, 60)
    for proc in (cluster, dispatch):
        log = proc.log_path.read_text()
        assert proc.popen.returncode == 0, log[-3000:]
        assert log.count(f"{proc.name}: Redis broker unavailable") == 1, log[-3000:]
        assert log.count(f"{proc.name}: Redis broker available again") == 1, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert "reincarnated" not in log, log[-3000:]  # the pusher never died


def test_qcluster_and_dispatch_exit_1_with_one_line_past_the_limit_of_a_redis_outage(tmp_path):
    run = make_run()
    with private_redis(tmp_path) as redis_server:
        env = redis_env(redis_server.url, SALVAGE_DB_OUTAGE_LIMIT="3")
        with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
            cluster = supervisor.start("qcluster", manage_py("qcluster"), env=env)
            dispatch = supervisor.start("dispatch", manage_py("dispatch", "--tick", "0.2"), env=env)
            wait_until(lambda: says(cluster, "running."), timeout=60, what="the cluster")
            redis_server.stop()
            make_tasks(run, 5)  # due work: the dispatcher needs the broker
            for proc in (cluster, dispatch):
                wait_until(lambda p=proc: not p.alive(), timeout=60, what=f"{proc.name} giving up")
            wait_until(lambda: not cluster.group_alive(), timeout=30, what="the cluster's group")
    for proc in (cluster, dispatch):
        log = proc.log_path.read_text()
        assert proc.popen.returncode == 1, log[-3000:]
        last = log.strip().splitlines()[-1]
        assert f"{proc.name}: Redis broker unavailable for" in last, log[-3000:]
        assert "over the 3 s limit (SALVAGE_DB_OUTAGE_LIMIT)" in last, log[-3000:]
        assert log.count(f"{proc.name}: Redis broker unavailable (") == 1, log[-3000:]
        assert "Traceback" not in log, log[-3000:]


def test_a_qcluster_started_while_redis_is_down_waits_for_it_and_then_works(tmp_path):
    run = make_run()
    redis_server = PrivateRedis(tmp_path)  # its port is chosen; the server is not started yet
    try:
        env = redis_env(redis_server.url)
        with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
            cluster = supervisor.start("qcluster", manage_py("qcluster"), env=env)
            dispatch = supervisor.start(
                "dispatch", manage_py("dispatch", "--tick", "0.2", "--batch", "10"), env=env
            )
            make_tasks(run, 20)
            wait_until(
                lambda: (
                    says(cluster, "qcluster: Redis broker unavailable")
                    and says(dispatch, "dispatch: Redis broker unavailable")
                ),
                timeout=60,
                what="both processes waiting for Redis",
            )
            assert cluster.alive() and dispatch.alive()
            redis_server.start()
            wait_until(lambda: all_terminal(run.pk), timeout=120, what="the run once Redis is up")
            for proc in (cluster, dispatch):
                wait_until(
                    lambda p=proc: says(p, f"{p.name}: Redis broker available again"),
                    timeout=30,
                    what=f"{proc.name} seeing Redis back",
                )
    finally:
        redis_server.stop()
    assert_each_task_done_once(run.pk, 20)
    for proc in (cluster, dispatch):
        log = proc.log_path.read_text()
        assert proc.popen.returncode == 0, log[-3000:]
        assert log.count(f"{proc.name}: Redis broker available again") == 1, log[-3000:]
        assert "Traceback" not in log, log[-3000:]


def test_sigterm_stops_a_qcluster_waiting_for_redis_at_once_and_cleanly(tmp_path):
    import signal

    redis_server = PrivateRedis(tmp_path)  # never started: the cluster waits for it
    env = redis_env(redis_server.url)
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        cluster = supervisor.start("qcluster", manage_py("qcluster"), env=env)
        wait_until(
            lambda: says(cluster, "qcluster: Redis broker unavailable"), timeout=60, what="waiting"
        )
        cluster.signal_group(signal.SIGTERM)
        # Well inside the supervisor's 30 s grace: a SIGKILL would make the status -9.
        wait_until(lambda: not cluster.alive(), timeout=20, what="the cluster to stop")
    log = cluster.log_path.read_text()
    assert cluster.popen.returncode == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
