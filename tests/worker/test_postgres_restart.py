"""Real PostgreSQL restarts under every long-running process: `pg_ctl restart -m fast`,
`restart -m immediate` (a crash: the server recovers from its WAL) and a 30 s stop, one after
the other, under two `work` processes, a qcluster, dispatch and deliver. Every process keeps
running through all three, and the run completes with each task done exactly once.

The server is a cluster of the test's own (tests/worker/outage_servers.py: initdb in a
temporary directory, its own port), never the shared one on 5432. The processes and the checks
all talk to it from child processes; the test process only counts rows over psycopg.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import psycopg
import pytest
from django.db import connection

from recovery.ops.processes import Supervisor, manage_py, wait_until
from tests.support.engine_procs import ROOT, child_env
from tests.worker.outage_servers import private_postgres

pytestmark = [pytest.mark.worker, pytest.mark.postgres, pytest.mark.slow]

# Tasks added before each event, so each one meets work in flight. On a quiet box two workers
# commit 400 noop tasks in well under a second, faster than the check below can look (a CI run
# found the wave done); 2,500 takes several seconds at that pace.
WAVE = 2500
STOP_SECONDS = 30


@pytest.fixture
def postgres_tier():
    # The processes use a private cluster either way; this keeps the minute it takes to the
    # PostgreSQL tier of CI, where PostgreSQL outages are the subject.
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL restarts: run in the PostgreSQL tier (DATABASE_URL=postgres://)")


def env_for(url: str, **extra: str) -> dict[str, str]:
    env = child_env(
        DATABASE_URL=url,
        SALVAGE_DB_RETRY_CAP="1",
        SALVAGE_HEARTBEAT_SECONDS="1",
        SALVAGE_Q_WORKERS="2",
        SALVAGE_CLAIM_BATCH="5",
        SALVAGE_CONCURRENCY="2",
        SALVAGE_OUTBOX_WAKE="0",
        **extra,
    )
    env.pop("REDIS_URL", None)  # the ORM broker: the queue is in the restarted database too
    return env


def django_child(env: dict[str, str], code: str) -> str:
    """Run `code` in a Django child process on the private cluster; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


ADD_WAVE = """
from recovery.models import Run
from tests.support.factories import make_run, make_tasks
run = Run.objects.first() or make_run()
make_tasks(run, {n})
print(run.pk)
"""

CHECK = """
from tests.support.engine_procs import assert_each_task_done_once
print(assert_each_task_done_once({run_id}, {n}))
"""


def states(url: str, run_id: int) -> dict[str, int]:
    try:
        with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=2) as c:
            rows = c.execute(
                "SELECT state, count(*) FROM recovery_task WHERE run_id = %s GROUP BY state",
                [run_id],
            ).fetchall()
    except psycopg.OperationalError:
        return {}
    return dict(rows)


def test_every_process_rides_out_fast_and_immediate_restarts_and_a_30_s_stop(
    postgres_tier, tmp_path
):
    with private_postgres() as server:
        env = env_for(server.url, SALVAGE_DESTINATION=f"file://{tmp_path}/drop")
        subprocess.run(
            manage_py("migrate", "--noinput", "-v", "0"), env=env, cwd=ROOT, check=True,
            timeout=300,
        )  # fmt: skip
        total = 0
        run_id = 0

        def committed() -> int:
            return states(server.url, run_id).get("committed", 0)

        def done() -> bool:
            s = states(server.url, run_id)
            return bool(s) and s.get("committed", 0) == total and sum(s.values()) == total

        events = [
            ("restart -m fast", lambda: server.restart("fast")),
            ("restart -m immediate", lambda: server.restart("immediate")),
            (f"stop for {STOP_SECONDS} s", lambda: stop_for(server, STOP_SECONDS)),
        ]
        with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
            procs = [
                *(
                    supervisor.start(f"work-{n}", manage_py("work", "--batch", "5"), env=env)
                    for n in (1, 2)
                ),
                supervisor.start("qcluster", manage_py("qcluster"), env=env),
                supervisor.start("dispatch", manage_py("dispatch", "--tick", "0.2"), env=env),
                supervisor.start("deliver", manage_py("deliver", "--interval", "0.5"), env=env),
            ]
            # Each loop running before the database first goes: what is under test is riding
            # out an outage, not starting during one (tests/worker/test_start_during_outage.py).
            wait_until(lambda: all(map(started, procs)), timeout=120, what="every loop started")
            for what, event in events:
                wave = WAVE
                for _ in range(4):
                    before = committed()
                    run_id = int(django_child(env, ADD_WAVE.format(n=wave)).split()[-1])
                    total += wave
                    wait_until(lambda b=before: committed() > b, timeout=60, what=f"work ({what})")
                    if committed() < total:
                        break
                    wave *= 2  # done before this check could look: a longer wave
                else:
                    pytest.fail(f"every wave was done before the {what} could meet it")
                event()
                for proc in procs:
                    assert proc.alive(), exited(proc, what)
                wait_until(done, timeout=240, what=f"the run after {what}")
                # Every loop that saw the database go has seen it come back (by itself).
                wait_until(lambda: all(map(recovered, procs)), timeout=60, what="every loop back")
                for proc in procs:
                    assert proc.alive(), exited(proc, what)
        print(django_child(env, CHECK.format(run_id=run_id, n=total)))
    for proc in procs:
        log = proc.log_path.read_text(errors="replace")
        assert proc.popen.returncode == 0, f"{proc.name}\n{log[-4000:]}"
        assert "over the" not in log, log[-4000:]
    # The 30 s stop is long enough for every loop to notice it: one line down, one line up,
    # and no traceback from any process (django-q2's own outage noise included).
    for proc in procs:
        log = proc.log_path.read_text(errors="replace")
        assert "database unavailable (" in log, f"{proc.name}\n{log[-4000:]}"
        assert recovered(proc), f"{proc.name}\n{log[-4000:]}"
        assert "Traceback" not in log, f"{proc.name}\n{log[-4000:]}"


def exited(proc, what: str) -> str:
    log = proc.log_path.read_text(errors="replace")
    return f"{proc.name} exited (code {proc.popen.returncode}) after {what}\n{log[-4000:]}"


def started(proc) -> bool:
    """The process's loop said it started (its worker_started line)."""
    kind = proc.name.split("-")[0]
    return (
        re.search(rf"\b{kind} \S+ started\b", proc.log_path.read_text(errors="replace")) is not None
    )


def recovered(proc) -> bool:
    """As many "available again" lines as "unavailable" ones in the process's log."""
    log = proc.log_path.read_text(errors="replace")
    kind = proc.name.split("-")[0]
    return log.count(f"{kind}: database unavailable (") == log.count(
        f"{kind}: database available again"
    )


def stop_for(server, seconds: float) -> None:
    server.stop("fast")
    time.sleep(seconds)  # the outage itself: its length is what is under test
    server.start()
