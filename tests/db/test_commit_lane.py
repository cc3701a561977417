"""Pipelined batches (recovery.commit_lane, worker.run_pipelined_batch): on PostgreSQL the loop
claims and runs batch N+1 while batch N commits on a second connection; a suspect page waits
for that commit; the loop's end collects the last commit; a failed commit is raised."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from recovery import worker
from recovery.models import Attempt, Task
from recovery.outcomes import Observed, Outcome
from tests.db.test_worker_steps import factory_for
from tests.support.engine_procs import wait_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def side_connection() -> psycopg.Connection:
    """A connection of the test's own, outside Django (the provider runs on the event loop's
    thread, where the ORM refuses to run)."""
    return psycopg.connect(**connection.get_connection_params())


def states(conn: psycopg.Connection, pks: list[int]) -> list[str]:
    rows = conn.execute(
        "SELECT state FROM recovery_task WHERE id = ANY(%s) ORDER BY id", [pks]
    ).fetchall()
    conn.commit()
    return [state for (state,) in rows]


class Probe:
    """A provider that calls `on_batch(number, tasks)` before answering each batch."""

    name = "probe"

    def __init__(self, on_batch):
        self.on_batch = on_batch
        self.batches = 0

    async def execute_many(self, tasks):
        self.batches += 1
        self.on_batch(self.batches, tasks)
        return [Outcome(http_status=200, observations=[Observed(t.url, {"n": 1})]) for t in tasks]

    async def aclose(self):
        return None


def probe_run(n: int) -> list[Task]:
    run = make_run(make_dataset(provider="probe"))
    return make_tasks(run, n)


def waiting_commits(conn: psycopg.Connection) -> int:
    """Backends of the test database blocked on a lock by an UPDATE of recovery_task."""
    (n,) = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE '%recovery_task%'"
    ).fetchone()
    conn.commit()
    return n


class RowHold:
    """A row lock held on a side connection (so that a commit touching the row waits), given
    up by `release()` or, at the latest, `after` seconds from `hold()`; and a second side
    connection to look at the tasks with meanwhile."""

    def __init__(self, after: float):
        self.blocker, self.observer = side_connection(), side_connection()
        self.timer = threading.Timer(after, self.blocker.commit)

    def hold(self, task_pk: int) -> None:
        self.blocker.execute("SELECT 1 FROM recovery_task WHERE id = %s FOR UPDATE", [task_pk])
        self.timer.start()

    def release(self) -> None:
        self.timer.cancel()
        self.blocker.commit()

    def __enter__(self) -> RowHold:
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        if self.timer.is_alive():
            self.timer.join()
        self.blocker.close()
        self.observer.close()


def run_probe(on_batch) -> worker.LoopStats:
    return worker.run_until_idle(
        "w-lane", batch_size=2, provider_factory=factory_for({"probe": Probe(on_batch)})
    )


def test_the_next_batch_runs_while_the_previous_one_commits(postgres_only):
    tasks = probe_run(4)
    first, second = [t.pk for t in tasks[:2]], [t.pk for t in tasks[2:]]
    seen: dict[str, object] = {}
    # If the loop were serial, batch 1's commit would wait on the lock for ever: it is given
    # up after 10 s so that the test fails instead of hanging.
    with RowHold(after=10) as lock:

        def on_batch(number, batch):
            if number == 1:  # hold a row of batch 1 so that its commit has to wait
                lock.hold(first[0])
            elif number == 2:
                seen["batch"] = sorted(t.task_id for t in batch)
                wait_for(
                    lambda: waiting_commits(lock.observer) == 1,
                    timeout=5,
                    what="batch 1's commit",
                    interval=0.02,
                )
                seen["first_states"] = states(lock.observer, first)
                lock.release()

        stats = run_probe(on_batch)

    assert seen["batch"] == second
    assert seen["first_states"] == ["leased", "leased"]  # batch 1 not committed yet
    assert stats.batches == 2 and stats.committed == 4
    assert set(Task.objects.values_list("state", flat=True)) == {"committed"}
    assert Attempt.objects.filter(outcome="committed").count() == 4


def test_a_suspect_page_runs_only_after_the_previous_commit(postgres_only):
    tasks = probe_run(3)
    first = [t.pk for t in tasks[:2]]
    Task.objects.filter(pk__in=first).update(priority=1)  # claimed first, together
    Task.objects.filter(pk=tasks[2].pk).update(crash_count=1)  # then the suspect, alone
    seen: dict[str, object] = {}
    with RowHold(after=1.0) as lock:  # batch 1's commit waits a second

        def on_batch(number, batch):
            if number == 1:
                lock.hold(first[0])
            else:
                seen["batch"] = [t.task_id for t in batch]
                seen["first_states"] = states(lock.observer, first)

        stats = run_probe(on_batch)

    assert seen["batch"] == [tasks[2].pk]
    assert seen["first_states"] == ["committed", "committed"]
    assert stats.committed == 3


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_stop_lets_the_batch_in_hand_commit(settings, pipelined):
    settings.SALVAGE_PIPELINE_COMMITS = pipelined
    tasks = probe_run(6)
    stop = threading.Event()

    def on_batch(number, batch):
        if number == 2:
            stop.set()  # SIGTERM during batch 2: the loop ends after it

    stats = worker.run_forever(
        "w-lane",
        batch_size=2,
        stop=stop,
        provider_factory=factory_for({"probe": Probe(on_batch)}),
    )

    assert worker.pipelines() is (pipelined and connection.vendor == "postgresql")
    assert stats.batches == 2 and stats.committed == 4
    committed = sorted(Task.objects.filter(state="committed").values_list("pk", flat=True))
    assert committed == [t.pk for t in tasks[:4]]
    assert Task.objects.filter(state="pending").count() == 2
    assert not [t for t in threading.enumerate() if t.name.startswith("salvage-commit")]


def test_a_failed_commit_is_raised_by_the_loop(postgres_only):
    probe_run(4)

    class Refused(Probe):
        async def execute_many(self, tasks):
            # jsonb refuses \u0000: the transaction on the commit lane fails, not its building
            return [Outcome(200, observations=[Observed(t.url, {"x": "\x00"})]) for t in tasks]

    with pytest.raises(psycopg.DataError, match="unsupported Unicode escape sequence"):
        worker.run_until_idle(
            "w-lane", batch_size=2, provider_factory=factory_for({"probe": Refused(None)})
        )

    assert not Task.objects.filter(state="committed").exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("salvage-commit")]
