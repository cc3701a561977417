"""Long-running processes ride out a PostgreSQL outage, and give up past the limit.

The outage is real: the test database stops accepting connections (`ALTER DATABASE ...
ALLOW_CONNECTIONS false`) and every backend of the processes under test is terminated
(`pg_terminate_backend`, what a fast restart does to them), for several seconds; the shared
server stays up for the other helpers and for this test's own connection, which the test uses
to write work while the processes cannot reach the database.
"""

from __future__ import annotations

import contextlib
import re
import time

import psycopg
import pytest
from django.db import connection

from recovery.models import OutboxEvent
from recovery.ops.processes import Supervisor, manage_py, wait_until
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run
from tests.support.engine_procs import child_env

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


def admin_dsn() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgresql://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/postgres"


@contextlib.contextmanager
def database_outage():
    """The test database refuses new connections and loses every other backend, until the
    block ends. This test's own connection (used to write work meanwhile) is spared."""
    name = connection.settings_dict["NAME"]
    connection.ensure_connection()
    mine = connection.connection.info.backend_pid
    others = "FROM pg_stat_activity WHERE datname = %s AND pid <> %s AND pid <> pg_backend_pid()"
    with psycopg.connect(admin_dsn(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            # pg_terminate_backend only signals: a backend already inside its COMMIT finishes
            # it first (interrupts are held there), and one that was starting up when
            # connections were refused may not be listed yet. The outage begins when every
            # other backend is gone, so signal again until none is left.
            wait_until(
                lambda: (
                    not admin.execute(
                        f"SELECT pg_terminate_backend(pid) {others}", [name, mine]
                    ).fetchall()
                ),
                timeout=30,
                what="every other backend of the test database to exit",
            )
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def accepted_event() -> OutboxEvent:
    run = make_collected_run({"a": "good"}, per_partition=2)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    return OutboxEvent.objects.get(run=run, event_type="accepted")


def delivered(event: OutboxEvent) -> bool:
    return OutboxEvent.objects.get(pk=event.pk).state == "delivered"


def test_deliver_rides_out_an_outage_and_resumes_by_itself(postgres_only, tmp_path):
    env = child_env(
        SALVAGE_DESTINATION=f"file://{tmp_path}/drop",
        SALVAGE_OUTBOX_WAKE="0",
        SALVAGE_DB_RETRY_CAP="1",
        SALVAGE_HEARTBEAT_SECONDS="1",
    )
    with Supervisor(grace=20, log_dir=tmp_path / "logs") as supervisor:
        deliver = supervisor.start("deliver", manage_py("deliver", "--interval", "0.2"), env=env)
        first = accepted_event()
        wait_until(lambda: delivered(first), timeout=60, what="the first delivery")
        with database_outage():
            during = accepted_event()  # written while the process cannot reach the database
            time.sleep(4)  # the outage itself: the process must keep running through it
            assert deliver.alive()
            assert not delivered(during)
        wait_until(lambda: delivered(during), timeout=60, what="the delivery after the outage")
        assert deliver.alive()
    log = deliver.log_path.read_text()
    assert log.count("deliver: database unavailable") == 1, log
    assert log.count("deliver: database available again") == 1, log
    assert "Traceback" not in log, log
    assert deliver.popen.returncode == 0  # stopped by SIGTERM, cleanly


def test_deliver_work_dispatch_and_qcluster_exit_1_with_one_line_past_the_limit(
    postgres_only, tmp_path
):
    env = child_env(
        SALVAGE_DESTINATION=f"file://{tmp_path}/drop",
        SALVAGE_OUTBOX_WAKE="0",
        SALVAGE_DB_OUTAGE_LIMIT="3",
        SALVAGE_DB_RETRY_CAP="0.5",
        SALVAGE_Q_LOG_LEVEL="INFO",  # the cluster's "running." line
    )
    with Supervisor(grace=20, log_dir=tmp_path / "logs") as supervisor:
        deliver = supervisor.start("deliver", manage_py("deliver", "--interval", "0.2"), env=env)
        work = supervisor.start("work", manage_py("work"), env=env)
        dispatch = supervisor.start("dispatch", manage_py("dispatch", "--tick", "0.2"), env=env)
        cluster = supervisor.start("qcluster", manage_py("qcluster"), env=env)
        first = accepted_event()
        wait_until(lambda: delivered(first), timeout=60, what="the first delivery")
        wait_until(lambda: "running." in cluster.log_path.read_text(), timeout=60, what="cluster")
        with database_outage():
            for proc in (deliver, work, dispatch, cluster):
                wait_until(lambda p=proc: not p.alive(), timeout=60, what=f"{proc.name} giving up")
            # The cluster's own processes (sentinel, pusher, workers, monitor) are gone too.
            wait_until(lambda: not cluster.group_alive(), timeout=30, what="the cluster's group")
    for proc in (deliver, work, dispatch, cluster):
        assert proc.popen.returncode == 1
        log = proc.log_path.read_text()
        last = log.strip().splitlines()[-1]
        assert f"{proc.name}: database unavailable for" in last, log
        assert "over the 3 s limit (SALVAGE_DB_OUTAGE_LIMIT)" in last, log
        assert log.count(f"{proc.name}: database unavailable (") == 1, log
        assert "Traceback" not in log, log


def committed(run_id: int) -> int:
    from recovery.models import Task

    return Task.objects.filter(run_id=run_id, state="committed").count()


def test_two_work_processes_ride_out_an_outage_and_finish_the_run_exactly_once(
    postgres_only,
    make_sandbox,
    tmp_path,
):
    from tests.support.direct import create_run, load_shop
    from tests.support.engine_procs import all_terminal, assert_each_task_done_once

    pages = 400
    shop = make_sandbox(pages=pages, faults="none", seed=3)
    load_shop("outage")
    run = create_run(
        "outage", [(shop.product_url(i), "product") for i in range(1, pages + 1)], tmp_path
    )
    env = child_env(
        SALVAGE_DB_RETRY_CAP="1",
        SALVAGE_HEARTBEAT_SECONDS="1",
        SALVAGE_DESTINATION=f"file://{tmp_path}/drop",
        SALVAGE_OUTBOX_WAKE="0",
    )
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        workers = [
            supervisor.start(
                f"work-{n}",
                manage_py("work", "--batch", "5", "--concurrency", "2"),
                env=env,
            )
            for n in (1, 2)
        ]
        deliver = supervisor.start("deliver", manage_py("deliver", "--interval", "0.2"), env=env)
        wait_until(lambda: committed(run.pk) >= 40, timeout=120, what="work under way")
        with database_outage():
            before = committed(run.pk)
            time.sleep(5)
            assert all(p.alive() for p in [*workers, deliver])
            assert committed(run.pk) == before  # nothing could commit meanwhile
        assert before < pages, "the run finished before the outage: make it longer"
        wait_until(lambda: all_terminal(run.pk), timeout=300, what="the run after the outage")
        # One worker can finish the run while the other is still in its backoff: wait for
        # each one's line rather than stop it first.
        for proc, kind in [*((w, "work") for w in workers), (deliver, "deliver")]:
            wait_until(
                lambda p=proc, k=kind: (
                    f"{k}: database available again" in p.log_path.read_text(errors="replace")
                ),
                timeout=30,
                what=f"{proc.name} seeing the database back",
            )
        assert all(p.alive() for p in [*workers, deliver])
    assert_each_task_done_once(run.pk, pages)
    for proc, kind in [*((w, "work") for w in workers), (deliver, "deliver")]:
        log = proc.log_path.read_text()
        assert proc.popen.returncode == 0, log[-3000:]
        assert log.count(f"{kind}: database unavailable") == 1, log[-3000:]
        assert log.count(f"{kind}: database available again") == 1, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert "Unclosed client session" not in log, log[-3000:]  # closed when a loop ends
    # Each worker's last line counts what it did before and after the outage. A batch whose
    # COMMIT reply the outage cut off is done but not counted: at most one per worker.
    reported = [
        int(re.search(r"(\d+) committed,", w.log_path.read_text()).group(1)) for w in workers
    ]
    assert pages - 2 * 5 <= sum(reported) <= pages, reported


def test_qcluster_and_dispatch_ride_out_an_outage_and_finish_the_run_exactly_once(
    postgres_only,
    make_sandbox,
    tmp_path,
):
    from tests.support.direct import create_run, load_shop
    from tests.support.engine_procs import all_terminal, assert_each_task_done_once

    pages = 400
    shop = make_sandbox(pages=pages, faults="none", seed=4)
    load_shop("outage-q")
    rows = [(shop.product_url(i), "product") for i in range(1, pages + 1)]
    run = create_run("outage-q", rows, tmp_path)
    env = child_env(
        SALVAGE_DB_RETRY_CAP="1",
        SALVAGE_HEARTBEAT_SECONDS="1",
        SALVAGE_Q_WORKERS="2",
        SALVAGE_CLAIM_BATCH="5",
        SALVAGE_CONCURRENCY="2",
    )
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        dispatch = supervisor.start("dispatch", manage_py("dispatch", "--tick", "0.2"), env=env)
        cluster = supervisor.start("qcluster", manage_py("qcluster"), env=env)
        wait_until(lambda: committed(run.pk) >= 40, timeout=120, what="work under way")
        with database_outage():
            before = committed(run.pk)
            time.sleep(5)
            assert dispatch.alive() and cluster.alive()
        assert before < pages, "the run finished before the outage: make it longer"
        wait_until(lambda: all_terminal(run.pk), timeout=300, what="the run after the outage")
        assert dispatch.alive() and cluster.alive()
    assert_each_task_done_once(run.pk, pages)
    # Each django-q2 worker process may fail the one task that met its dead connection; the
    # next task gets a fresh one (it used to fail every task until the connection aged out).
    log = cluster.log_path.read_text()
    failed = log.count("Failed 'recovery.tasks.run_batch_task'")
    assert failed <= 2 * 2, log[-4000:]  # two worker processes, one outage (+ a reconnect race)
    log = dispatch.log_path.read_text()
    assert dispatch.popen.returncode == 0, log[-3000:]
    assert log.count("dispatch: database unavailable") == 1, log[-3000:]
    assert log.count("dispatch: database available again") == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def status_of(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_readyz_is_503_during_an_outage_and_200_after_while_healthz_stays_200(
    postgres_only, tmp_path
):
    from recovery.ops.processes import free_port, http_ok
    from recovery.showroom import demo

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with Supervisor(grace=20, log_dir=tmp_path / "logs") as supervisor:
        web = supervisor.start("web", demo.gunicorn_command(port), env=child_env())
        wait_until(lambda: http_ok(f"{base}/healthz"), timeout=60, what="the web server")
        assert status_of(f"{base}/readyz") == 200
        with database_outage():
            wait_until(lambda: status_of(f"{base}/readyz") == 503, timeout=20, what="503")
            assert status_of(f"{base}/healthz") == 200  # liveness never touches the database
        wait_until(lambda: status_of(f"{base}/readyz") == 200, timeout=30, what="ready again")
        assert web.alive()
