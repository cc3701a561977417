"""Every long process stops cleanly under any supervisor: SIGTERM to its whole process group
(systemd's default KillMode=control-group signals every process of the unit) and SIGTERM to
its main process alone both let the work in hand finish, leave no task leased, and exit 0.

Leases here last 120 s, so a task its worker died holding stays `leased` (with an unexpired
lease) for the rest of the test: the check below cannot pass by waiting for an expiry.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from django.utils import timezone

from recovery.models import Task, WorkerHeartbeat
from tests.support.engine_procs import Procs, log_text, wait_exit, wait_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LEASE = 120
PAGE_SECONDS = 3  # each batch of the slow provider takes this long: the signal lands mid-batch
BATCH = 3
ENV = {
    "SALVAGE_LEASE_SECONDS": str(LEASE),
    "SALVAGE_HEARTBEAT_SECONDS": "0.5",
    "SALVAGE_WORKER_ALIVE_SECONDS": "5",
    "SALVAGE_WORKER_GONE_SECONDS": "30",
    "SLOW_PROVIDER_SLEEP": str(PAGE_SECONDS),
    "SALVAGE_Q_WORKERS": "2",
    "SALVAGE_Q_TIMEOUT": "60",
    "SALVAGE_Q_RETRY": "240",
}
FORMS = ["process group", "main process"]
EXIT_DEADLINE = 45  # seconds: a batch in flight, then the exit


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def _terminate(proc: subprocess.Popen, form: str) -> None:
    if form == "process group":
        os.killpg(proc.pid, signal.SIGTERM)  # Procs starts each child in its own session
    else:
        os.kill(proc.pid, signal.SIGTERM)


def _live_members(pgid: int) -> list[int]:
    """Processes of the group that are not zombies (an orphan is reaped by whoever adopts it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _leased(run_id: int) -> list[tuple[str, object]]:
    return list(
        Task.objects.filter(run_id=run_id, state="leased").values_list("lease_owner", "lease_until")
    )


def _states(run_id: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in Task.objects.filter(run_id=run_id).values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts


def _assert_stopped_cleanly(proc: subprocess.Popen, run_id: int | None = None) -> None:
    code = wait_exit(proc, EXIT_DEADLINE, "the process")
    assert code == 0, log_text(proc)[-3000:]
    if run_id is not None:
        now = timezone.now()
        held = [(owner, until) for owner, until in _leased(run_id) if until and until > now]
        assert held == [], f"tasks left leased by the stopped process\n{log_text(proc)[-3000:]}"
        assert _leased(run_id) == []
    # Nothing of it is left behind: no orphaned child still running (or still holding work).
    wait_for(lambda: not _live_members(proc.pid), timeout=10, what="every process of the group")
    # It said goodbye (a clean exit), so the workers page shows it gone at once.
    rows = WorkerHeartbeat.objects.filter(pid=proc.pid)
    assert rows.exists() and not rows.filter(stopped_at=None).exists()


@pytest.mark.parametrize("form", FORMS)
def test_work_finishes_its_batch_and_exits_0(form, procs):
    run = make_run(make_dataset(provider="slow_test", lease_seconds=LEASE))
    make_tasks(run, 2 * BATCH)
    proc = procs.python(
        "work",
        "import tests.worker.slow_provider; from django.core.management import call_command; "
        f"call_command('work', '--batch', '{BATCH}', '--worker-id', 'stopper')",
        **ENV,
    )
    wait_for(
        lambda: (
            Task.objects.filter(run=run, state="leased", lease_owner="stopper").count() == BATCH
        ),
        timeout=90,
        what=f"the first batch in flight\n{log_text(proc)[-2000:]}",
    )
    _terminate(proc, form)
    _assert_stopped_cleanly(proc, run.pk)
    assert _states(run.pk) == {"committed": BATCH, "pending": BATCH}


@pytest.mark.parametrize("form", FORMS)
def test_qcluster_finishes_the_batches_in_flight_and_starts_no_other(form, procs):
    from django_q.tasks import async_task

    run = make_run(make_dataset(provider="slow_test", lease_seconds=LEASE))
    make_tasks(run, 4 * BATCH)
    proc = procs.python(
        "qcluster",
        "import tests.worker.slow_provider; from django.core.management import call_command; "
        "call_command('qcluster')",
        **ENV,
    )
    # Four wake-ups: one for each of the two workers, two more waiting in the cluster's
    # prefetch queue when the signal comes. Those two must claim nothing.
    for _ in range(4):
        async_task("recovery.tasks.run_batch_task", batch_size=BATCH, q_options={"save": False})
    wait_for(
        lambda: Task.objects.filter(run=run, state="leased").count() == 2 * BATCH,
        timeout=90,
        what=f"both workers' batches in flight\n{log_text(proc)[-3000:]}",
    )
    _terminate(proc, form)
    _assert_stopped_cleanly(proc, run.pk)
    assert _states(run.pk) == {"committed": 2 * BATCH, "pending": 2 * BATCH}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", ["dispatch", "deliver"])
def test_the_dispatcher_and_the_delivery_loop_exit_0(kind, form, procs, tmp_path):
    run = make_run()
    make_tasks(run, 2)  # due work: the dispatcher has something to tick about
    proc = procs.manage(
        kind, kind, SALVAGE_DESTINATION=(tmp_path / "out").as_uri(), SALVAGE_Q_WORKERS="1"
    )
    wait_for(
        lambda: WorkerHeartbeat.objects.filter(pid=proc.pid, kind=kind).exists(),
        timeout=90,
        what=f"the {kind} process running\n{log_text(proc)[-2000:]}",
    )
    _terminate(proc, form)
    _assert_stopped_cleanly(proc)


def test_a_cluster_whose_main_process_was_killed_still_stops_on_sigterm(procs):
    """Its processes ignore SIGTERM only while the main process lives to drain them: orphaned
    (the main process SIGKILLed), the sentinel drains itself on SIGTERM, as it did before."""
    from django_q.tasks import async_task

    run = make_run(make_dataset(provider="slow_test", lease_seconds=LEASE))
    make_tasks(run, BATCH)
    proc = procs.python(
        "qcluster",
        "import tests.worker.slow_provider; from django.core.management import call_command; "
        "call_command('qcluster')",
        **ENV,
    )
    async_task("recovery.tasks.run_batch_task", batch_size=BATCH, q_options={"save": False})
    wait_for(
        lambda: Task.objects.filter(run=run, state="leased").count() == BATCH,
        timeout=90,
        what=f"the batch in flight\n{log_text(proc)[-3000:]}",
    )
    os.kill(proc.pid, signal.SIGKILL)
    assert wait_exit(proc, 30, "the main process") == -signal.SIGKILL
    assert _live_members(proc.pid), "the cluster died with its main process"
    os.killpg(proc.pid, signal.SIGTERM)
    wait_for(
        lambda: not _live_members(proc.pid),
        timeout=EXIT_DEADLINE,
        what=f"the orphaned cluster to stop\n{log_text(proc)[-3000:]}",
    )
    assert _leased(run.pk) == []
    assert _states(run.pk) == {"committed": BATCH}


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_cluster_whose_sentinel_dies_unasked_exits_1_with_one_line(procs):
    """Exit 0 would tell a supervisor restarting on failure (Restart=on-failure) that all is
    well, and no cluster would run until someone looked."""
    proc = procs.python(
        "qcluster", "from django.core.management import call_command; call_command('qcluster')",
        **ENV,
    )  # fmt: skip
    wait_for(
        lambda: "started" in log_text(proc) and _children(proc.pid),
        timeout=60,
        what=f"the cluster to start\n{log_text(proc)[-3000:]}",
    )
    (sentinel,) = _children(proc.pid)
    os.kill(sentinel, signal.SIGKILL)
    code = wait_exit(proc, EXIT_DEADLINE, "the main process")
    log = log_text(proc)
    assert code == 1, log[-3000:]
    assert f"the cluster's sentinel exited by itself (exit code -{signal.SIGKILL})" in log, log
    wait_for(lambda: not _live_members(proc.pid), timeout=30, what="every process of the group")
