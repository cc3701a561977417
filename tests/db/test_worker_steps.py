"""The worker's steps in-process: run_batch, provider grouping, concurrency lanes, failures."""

from __future__ import annotations

import asyncio

import pytest

from recovery import counters, worker
from recovery.models import Attempt, Observation, Task, WorkerHeartbeat
from recovery.outcomes import ErrorClass, Observed, Outcome
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db


class Recording:
    """A provider that records how it was called and how many tasks ran at once."""

    name = "recording"

    def __init__(self, fail: bool = False, wrong_count: bool = False):
        self.calls: list[int] = []
        self.running = 0
        self.peak = 0
        self.fail = fail
        self.wrong_count = wrong_count

    async def execute_many(self, tasks):
        self.calls.append(len(tasks))
        self.running += len(tasks)
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.01)
        self.running -= len(tasks)
        if self.fail:
            raise RuntimeError("boom")
        outcomes = [
            Outcome(http_status=200, observations=[Observed(t.url, {"spec": bool(t.spec)})])
            for t in tasks
        ]
        return outcomes[:-1] if self.wrong_count else outcomes

    async def aclose(self):
        return None


def factory_for(providers: dict[str, Recording]):
    def factory(name, options):
        return providers[name]

    return factory


def test_it_returns_false_when_nothing_is_due():
    assert not worker.run_batch("w1")


def test_a_batch_claims_executes_and_commits():
    run = make_run()
    make_tasks(run, 5)
    result = worker.run_batch("w1", batch_size=10)
    assert result and result.claimed == 5
    assert result.summary.states == {"committed": 5}
    assert Observation.objects.count() == 5
    assert counters.by_state(run.pk) == {"committed": 5}
    assert WorkerHeartbeat.objects.get(worker="w1").committed == 5


def test_a_mixed_batch_goes_to_each_datasets_provider():
    a = make_run(make_dataset(provider="pa"))
    b = make_run(make_dataset(provider="pb"))
    make_tasks(a, 3)
    make_tasks(b, 2, host="b.test")
    providers = {"pa": Recording(), "pb": Recording()}
    result = worker.run_batch("w1", factory_for(providers), batch_size=10, concurrency=10)
    assert result.summary.states == {"committed": 5}
    assert providers["pa"].calls == [3]
    assert providers["pb"].calls == [2]
    # Each task got its dataset's spec.
    assert all(o.payload == {"spec": True} for o in Observation.objects.all())


def test_concurrency_bounds_the_tasks_running_at_once():
    run = make_run(make_dataset(provider="pa"))
    make_tasks(run, 10)
    provider = Recording()
    worker.run_batch("w1", factory_for({"pa": provider}), batch_size=10, concurrency=3)
    assert provider.peak == 3
    assert sum(provider.calls) == 10
    assert Task.objects.filter(state="committed").count() == 10


@pytest.mark.parametrize("broken", [{"fail": True}, {"wrong_count": True}])
def test_a_broken_provider_quarantines_its_tasks_as_internal_errors(broken):
    run = make_run(make_dataset(provider="pa"))
    make_tasks(run, 2)
    worker.run_batch("w1", factory_for({"pa": Recording(**broken)}), batch_size=10)
    assert set(Task.objects.values_list("state", "last_error_class")) == {
        ("quarantined", ErrorClass.INTERNAL)
    }
    assert Attempt.objects.filter(outcome="quarantined").count() == 2


def test_an_unknown_provider_quarantines_instead_of_spinning():
    run = make_run(make_dataset(provider="no-such-provider"))
    make_tasks(run, 1)
    worker.run_batch("w1", batch_size=10)
    attempt = Attempt.objects.get()
    assert attempt.outcome == "quarantined"
    assert "no-such-provider" in attempt.error_detail


def test_run_until_idle_drains_everything_due():
    run = make_run()
    make_tasks(run, 120)
    stats = worker.run_until_idle("w1", batch_size=50)
    assert (stats.batches, stats.claims, stats.committed) == (3, 120, 120)
    assert not worker.has_due_work()


def test_extra_steps_and_idle_checks_are_called(monkeypatch):
    calls = []
    monkeypatch.setattr(worker, "STEPS", [lambda wid: calls.append(wid) or False])
    pending = iter([True, False])
    monkeypatch.setattr(worker, "IDLE_CHECKS", [lambda: next(pending)])
    worker.run_until_idle("w9")
    assert calls == ["w9", "w9"]  # the idle check kept the loop for one more round
