"""A poison page and an unlucky one, with real `manage.py work` processes SIGKILLed while
they hold that page (recovery.faults: SALVAGE_FAULT_POINT=after_fetch with
SALVAGE_FAULT_URL, so the worker process kills itself only when the page is in its batch).

The poison page kills every worker that runs it: once its crash budget is spent it ends
quarantined as worker_crash_loop with its lost attempts as evidence, and every other page
commits exactly once. A page killed only twice (under the budget) still commits: crashes do
not use its retry budget. A dead worker is restarted at once, as a supervisor would.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from recovery import counters
from recovery.models import Attempt, Observation, Task
from tests.support.engine_procs import Procs, all_terminal, log_text, wait_for
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

N_TASKS = 20
BATCH = 5
BUDGET = 3  # SALVAGE_CRASH_BUDGET for these workers (default 10: the same code path)
POISON = "/item/7"


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


class Fleet:
    """Two `work` processes; one that dies is restarted under a new worker id."""

    def __init__(self, procs: Procs, **env: str):
        self.procs, self.env, self.starts, self.live = procs, env, 0, {}
        self.exits: list[tuple[str, int]] = []
        for slot in ("a", "b"):
            self.start(slot)

    def start(self, slot: str) -> None:
        self.starts += 1
        wid = f"w{slot}.{self.starts}"
        self.live[slot] = (
            wid,
            self.procs.manage(
                wid,
                "work",
                "--batch",
                str(BATCH),
                "--worker-id",
                wid,
                SALVAGE_CRASH_BUDGET=str(BUDGET),
                SALVAGE_FAULT_POINT="after_fetch",
                SALVAGE_FAULT_URL=POISON,
                **self.env,
            ),
        )

    def keep_alive(self) -> None:
        for slot, (wid, proc) in list(self.live.items()):
            if proc.poll() is not None:
                self.exits.append((wid, proc.returncode))
                self.start(slot)

    def run_until_terminal(self, run_id: int) -> None:
        def done() -> bool:
            self.keep_alive()
            return all_terminal(run_id)

        logs = lambda: "\n".join(log_text(p)[-1500:] for _w, p in self.live.values())  # noqa: E731
        wait_for(done, timeout=240, what=f"every task terminal\n{logs()}")
        for _wid, proc in self.live.values():
            self.procs.stop(proc)  # (one restarted a moment ago may not have its handler yet)


def poison_task(run_id: int) -> Task:
    return Task.objects.get(run_id=run_id, url__endswith=POISON)


def assert_others_committed_once(run_id: int, poison_id: int) -> None:
    others = Task.objects.filter(run_id=run_id).exclude(pk=poison_id)
    assert set(others.values_list("state", flat=True)) == {"committed"}
    assert Observation.objects.filter(run_id=run_id).count() == others.count()
    committed = Counter(
        Attempt.objects.filter(run_id=run_id, outcome="committed").values_list("task_id", flat=True)
    )
    assert set(committed) == set(others.values_list("pk", flat=True))
    assert set(committed.values()) == {1}


def test_a_page_that_kills_every_worker_ends_quarantined_as_a_crash_loop(procs):
    run = make_run(make_dataset(max_attempts=2))
    make_tasks(run, N_TASKS)
    fleet = Fleet(procs)
    fleet.run_until_terminal(run.pk)

    poison = poison_task(run.pk)
    assert (poison.state, poison.last_error_class, poison.crash_count) == (
        "quarantined",
        "worker_crash_loop",
        BUDGET,
    )
    # Each crash was a real SIGKILL of a worker process holding the page, and there were
    # exactly as many as the budget: after the first one, the page was claimed alone.
    killed = [wid for wid, rc in fleet.exits if rc == -signal.SIGKILL]
    assert len(killed) == BUDGET and len(fleet.exits) == BUDGET, fleet.exits
    lost = Attempt.objects.filter(task_id=poison.pk, outcome="lost_lease").order_by("lease_token")
    assert sorted({a.worker for a in lost}) == sorted(killed)
    verdict = Attempt.objects.get(task_id=poison.pk, outcome="quarantined")
    assert verdict.error_class == "worker_crash_loop"
    evidence = verdict.artefact["worker_crashes"]
    assert sorted({e["worker"] for e in evidence}) == sorted(killed)
    assert all(e["taken_over_at"] for e in evidence)
    assert not Observation.objects.filter(source_task_id=poison.pk).exists()

    # The neighbours the first crash took down had max_attempts=2 and lost one attempt each:
    # they commit all the same.
    assert_others_committed_once(run.pk, poison.pk)
    assert Task.objects.filter(run_id=run.pk, crash_count=1).count() >= 1
    assert counters.by_state(run.pk) == {"committed": N_TASKS - 1, "quarantined": 1}


def test_a_page_killed_twice_still_commits(procs, tmp_path):
    run = make_run(make_dataset(max_attempts=2))
    make_tasks(run, N_TASKS)
    # Two kills in all, across every worker process (recovery.faults' O_EXCL files).
    fleet = Fleet(procs, SALVAGE_FAULT_ONCE=str(tmp_path / "kill"), SALVAGE_FAULT_TIMES="2")
    fleet.run_until_terminal(run.pk)

    unlucky = poison_task(run.pk)
    assert (unlucky.state, unlucky.crash_count, unlucky.attempt_count) == ("committed", 2, 3)
    assert [rc for _w, rc in fleet.exits] == [-signal.SIGKILL, -signal.SIGKILL]
    assert Attempt.objects.filter(task_id=unlucky.pk, outcome="lost_lease").count() == 2
    assert_others_committed_once(run.pk, -1)
    assert counters.by_state(run.pk) == {"committed": N_TASKS}
