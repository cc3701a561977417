"""A 1,000-page run of the direct provider with the "mixed" fault profile, on real processes.

Two `manage.py work` processes fetch from the sandbox over real sockets. Every task must end
terminal, in the state the sandbox's fault lookup says the retry table should reach, with
exactly the expected observations (computed up front by `expected()`, never hard-coded).
"""

from __future__ import annotations

from collections import Counter

import pytest

from recovery.models import Attempt, Observation, Task
from tests.support.direct import create_run, load_shop
from tests.support.engine_procs import Procs, all_terminal, log_text, wait_exit

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Retries come quickly (the sandbox's transient faults clear after one or two hits); the
# budget of 5 attempts still runs out for the persistent 503.
FAST_RETRY = {"SALVAGE_BACKOFF_BASE": "0.05", "SALVAGE_BACKOFF_CAP": "0.5"}


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_a_mixed_run_of_1000_pages_ends_terminal_with_the_expected_observations(
    make_sandbox,
    procs,
    tmp_path,
):
    shop = make_sandbox(pages=1000, faults="mixed", seed=7, retry_after_seconds=1)
    summary = shop.summary()
    # The profile really is mixed: most kinds are present in these 1,000 pages.
    assert len(summary["kinds"]) >= 15 and summary["kinds"]["ok"] < 1000
    load_shop("mixed")
    rows = [(shop.product_url(i), "product") for i in range(1, 1001)]
    run = create_run("mixed", rows, tmp_path)

    workers = [
        procs.manage(
            f"w{n}", "work", "--until-idle", "--idle-wait", "3", "--batch", "50", **FAST_RETRY
        )
        for n in (1, 2)
    ]
    for proc in workers:
        assert wait_exit(proc, 600, "a worker") == 0, log_text(proc)[-3000:]
        # Every HTTP session is closed at exit (the first batch's provider used to leak one).
        assert "Unclosed client session" not in log_text(proc), log_text(proc)[-3000:]

    assert all_terminal(run.pk)
    tasks = {t.url: t for t in Task.objects.filter(run=run)}
    assert len(tasks) == 1000
    wrong = []
    for i in range(1, 1001):
        expected = shop.expected(i)
        task = tasks[shop.product_url(i)]
        if task.state != expected.final_state or (
            expected.final_state != "committed" and task.last_error_class != expected.error_class
        ):
            wrong.append((i, expected.kind, task.state, task.last_error_class))
    assert wrong == []
    states = Counter(t.state for t in tasks.values())
    assert dict(states) == summary["final_states"]

    observations = Observation.objects.filter(run=run)
    assert observations.count() == summary["observations"]
    prices = [payload["price"] for payload in observations.values_list("payload", flat=True)]
    negative = [price for price in prices if price.startswith("-")]
    assert len(negative) == summary["invalid_prices"]  # extracted as served, for validation
    # Each committed task committed exactly once.
    committed = Counter(
        Attempt.objects.filter(run=run, outcome="committed").values_list("task_id", flat=True)
    )
    assert len(committed) == states["committed"] and set(committed.values()) == {1}


def test_the_direct_provider_runs_inside_the_django_q2_cluster(
    make_sandbox,
    procs,
    tmp_path,
):
    from django_q.models import OrmQ

    from tests.support.engine_procs import wait_for

    shop = make_sandbox(pages=300, faults="mixed", seed=3, retry_after_seconds=1)
    summary = shop.summary()
    load_shop("qmixed")
    run = create_run("qmixed", [(shop.product_url(i), "product") for i in range(1, 301)], tmp_path)
    cluster = procs.manage("qcluster", "qcluster", SALVAGE_Q_WORKERS="2", **FAST_RETRY)
    dispatcher = procs.manage("dispatch", "dispatch", "--tick", "0.2", "--batch", "50")
    wait_for(
        lambda: all_terminal(run.pk),
        timeout=300,
        what=f"every task terminal\n{log_text(cluster)[-3000:]}",
    )
    wait_for(lambda: not OrmQ.objects.exists(), timeout=120, what="the queue to drain")
    assert procs.stop(dispatcher) == 0
    procs.stop(cluster)
    states = Counter(Task.objects.filter(run=run).values_list("state", flat=True))
    assert dict(states) == summary["final_states"]
    assert Observation.objects.filter(run=run).count() == summary["observations"]
    # The fetches ran in the cluster's worker processes (the only workers started here).
    workers = set(Attempt.objects.filter(run=run).values_list("worker", flat=True))
    assert workers and all(workers)
