"""A loop started while PostgreSQL is down waits for it, as a running loop rides out an outage:
`qcluster`, `work`, `dispatch` and `deliver` each log one line, keep running, and go on to
start and work once the database is back; past SALVAGE_DB_OUTAGE_LIMIT each exits 1 with one
line. (A qcluster started during an outage used to exit 1 at once, with a traceback: django-q2's
sentinel connects to the database as it starts.)

The server is a cluster of the test's own (tests/worker/outage_servers.py), stopped before the
loop starts; the give-up cases need no server at all, only a port where none listens.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest

from recovery.ops.processes import Supervisor, free_port, manage_py, wait_until
from tests.support.engine_procs import ROOT, child_env
from tests.worker.outage_servers import PrivatePostgres, private_postgres

pytestmark = [pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow]

LOOPS = {
    "qcluster": manage_py("qcluster"),
    "work": manage_py("work", "--batch", "5"),
    "dispatch": manage_py("dispatch", "--tick", "0.2"),
    "deliver": manage_py("deliver", "--interval", "0.2"),
}
TASKS = 20
# Several retries at the 1 s backoff cap (a qcluster used to exit within 2 s of its start).
OUTAGE_SECONDS = 4


def env_for(url: str, **extra: str) -> dict[str, str]:
    env = child_env(
        DATABASE_URL=url,
        **{
            "SALVAGE_DB_RETRY_CAP": "1",
            "SALVAGE_HEARTBEAT_SECONDS": "1",
            "SALVAGE_Q_WORKERS": "2",
            "SALVAGE_OUTBOX_WAKE": "0",
            **extra,
        },
    )
    env.pop("REDIS_URL", None)  # the ORM broker: the queue is in the stopped database too
    return env


@pytest.fixture(scope="module")
def migrated_postgres() -> Iterator[PrivatePostgres]:
    """One private cluster, migrated once, for every loop's case (each stops and starts it)."""
    with private_postgres() as server:
        subprocess.run(
            manage_py("migrate", "--noinput", "-v", "0"), env=env_for(server.url), cwd=ROOT,
            check=True, timeout=300,
        )  # fmt: skip
        yield server


ADD_TASKS = """
from tests.support.factories import make_dataset, make_run, make_tasks
run = make_run(make_dataset(name={name!r}))
make_tasks(run, {n})
print(run.pk)
"""


def add_tasks(env: dict[str, str], name: str, n: int) -> int:
    """A run of `n` due tasks in a dataset `name`, made by a Django child process on the
    private cluster."""
    code = ADD_TASKS.format(name=name, n=n)
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout.split()[-1])


def query(url: str, sql: str, *params: object) -> int:
    with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=5) as c:
        return c.execute(sql, params).fetchone()[0]


def committed(url: str, run_id: int) -> int:
    sql = "SELECT count(*) FROM recovery_task WHERE run_id = %s AND state = 'committed'"
    return query(url, sql, run_id)


def beating(url: str, kind: str) -> int:
    """Heartbeat rows of `kind` (the loop wrote to the database: it is back at work)."""
    return query(url, "SELECT count(*) FROM recovery_workerheartbeat WHERE kind = %s", kind)


def log_of(proc) -> str:
    return proc.log_path.read_text(errors="replace")


def waiting_or_gone(proc, line: str) -> bool:
    return line in log_of(proc) or not proc.alive()


@pytest.mark.parametrize("loop", list(LOOPS))
def test_a_loop_started_while_postgres_is_down_waits_for_it_then_starts_and_works(
    loop, postgres_only, migrated_postgres, tmp_path
):
    server = migrated_postgres
    env = env_for(server.url, SALVAGE_DESTINATION=f"file://{tmp_path}/drop")
    run_id = add_tasks(env, f"shop-{loop}", TASKS)
    server.stop("fast")
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        try:
            proc = supervisor.start(loop, LOOPS[loop], env=env)
            down = f"{loop}: database unavailable ("
            wait_until(lambda: waiting_or_gone(proc, down), timeout=60, what=f"{loop} waiting")
            time.sleep(OUTAGE_SECONDS)  # the outage itself: its length is what is under test
            assert proc.alive(), f"{loop} exited ({proc.popen.returncode})\n{log_of(proc)[-4000:]}"
        finally:
            server.start()  # the next case needs it, whatever happened here
        back = f"{loop}: database available again"
        wait_until(lambda: back in log_of(proc), timeout=60, what=f"{loop} seeing it back")
        wait_until(
            lambda: re.search(rf"\b{loop} \S+ started\b", log_of(proc)),
            timeout=60,
            what=f"{loop}'s worker_started line",
        )
        if loop == "qcluster":
            # The wake-ups a dispatcher sends: the cluster claims and commits the run.
            subprocess.run(
                manage_py("dispatch", "--once"), env=env, cwd=ROOT, check=True, timeout=120
            )
        if loop in ("qcluster", "work"):
            wait_until(
                lambda: committed(server.url, run_id) == TASKS, timeout=120, what="the run done"
            )
        if loop == "dispatch":  # its first tick after the outage sends the run's wake-ups
            wait_until(
                lambda: query(server.url, "SELECT count(*) FROM django_q_ormq") > 0,
                timeout=60,
                what="the dispatcher's wake-ups queued",
            )
        wait_until(lambda: beating(server.url, loop), timeout=30, what=f"{loop}'s heartbeat row")
        assert proc.alive()
        assert supervisor.stop(loop) == 0, log_of(proc)[-4000:]  # SIGTERM: a clean exit
    log = log_of(proc)
    assert log.count(down) == 1, log[-4000:]
    assert log.count(back) == 1, log[-4000:]
    assert "Traceback" not in log, log[-4000:]
    if loop == "qcluster":  # the cluster starts once the database is back, not before
        assert log.index(back) < re.search(r"\bqcluster \S+ started\b", log).start(), log
    if loop == "dispatch":
        sent = int(re.search(r"dispatcher stopped: (\d+) wake-ups sent", log).group(1))
        assert sent > 0, log[-4000:]


@pytest.mark.parametrize("loop", list(LOOPS))
def test_a_loop_started_while_postgres_is_down_exits_1_with_one_line_past_the_limit(
    loop, postgres_only, tmp_path
):
    # Nothing listens on the port: every connection is refused, as by a stopped server.
    env = env_for(
        f"postgres://postgres@127.0.0.1:{free_port()}/salvage",
        SALVAGE_DB_OUTAGE_LIMIT="3",
        SALVAGE_DB_RETRY_CAP="0.5",
    )
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        proc = supervisor.start(loop, LOOPS[loop], env=env)
        wait_until(lambda: not proc.alive(), timeout=60, what=f"{loop} giving up")
        wait_until(lambda: not proc.group_alive(), timeout=30, what=f"{loop}'s process group")
    log = log_of(proc)
    assert proc.popen.returncode == 1, log[-4000:]
    last = log.strip().splitlines()[-1]
    assert f"{loop}: database unavailable for" in last, log[-4000:]
    assert "over the 3 s limit (SALVAGE_DB_OUTAGE_LIMIT)" in last, log[-4000:]
    assert log.count(f"{loop}: database unavailable (") == 1, log[-4000:]
    assert "Traceback" not in log, log[-4000:]


@pytest.mark.parametrize("loop", list(LOOPS))
def test_sigterm_ends_a_loop_waiting_for_postgres_at_start_at_once_and_cleanly(
    loop, postgres_only, tmp_path
):
    env = env_for(f"postgres://postgres@127.0.0.1:{free_port()}/salvage")
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        proc = supervisor.start(loop, LOOPS[loop], env=env)
        down = f"{loop}: database unavailable ("
        wait_until(lambda: waiting_or_gone(proc, down), timeout=60, what=f"{loop} waiting")
        proc.signal_group(signal.SIGTERM)
        # Well inside the supervisor's 30 s grace: a SIGKILL would make the status -9.
        wait_until(lambda: not proc.alive(), timeout=20, what=f"{loop} to stop")
    log = log_of(proc)
    assert proc.popen.returncode == 0, log[-4000:]
    assert "Traceback" not in log, log[-4000:]


START_CLUSTER = """
from recovery.ops.qcluster_stopping import Cluster
cluster = Cluster()
cluster.start()
print("started", flush=True)
cluster.request_stop()
cluster.sentinel.join(60)
print("sentinel exit code", cluster.sentinel.exitcode)
"""


def test_a_cluster_whose_sentinel_starts_while_postgres_is_down_starts_and_stops_cleanly(
    postgres_only,
):
    # The command waits for the database before it starts the cluster, but the database can
    # go between its probe and the sentinel's start: the sentinel's ORM broker connected as
    # it was made, and the refused connection killed the sentinel (the cluster "failed to
    # start"). The cluster is started here without the command's wait.
    env = env_for(f"postgres://postgres@127.0.0.1:{free_port()}/salvage")
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + START_CLUSTER],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "started" in done.stdout and "sentinel exit code 0" in done.stdout, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
