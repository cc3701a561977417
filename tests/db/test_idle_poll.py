"""How often an idle worker loop polls: `--until-idle` waits for other workers' batches in flight
at most a tenth of a second between polls (it exits soon after their last commit); a standing
worker backs off to one poll a second."""

from __future__ import annotations

import threading

import pytest

from recovery import leases, worker
from recovery.models import Task
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db(transaction=True)


class RecordingStop(threading.Event):
    """The loop's stop event: records each wait; after `polls` waits the other worker's batch
    is done (its task committed by hand) and, for a standing loop, the stop is set."""

    def __init__(self, task_pk: int, polls: int, then_stop: bool):
        super().__init__()
        self.waits: list[float] = []
        self.task_pk, self.polls, self.then_stop = task_pk, polls, then_stop

    def wait(self, timeout=None):
        self.waits.append(timeout)
        if len(self.waits) == self.polls:
            Task.objects.filter(pk=self.task_pk).update(state="committed", lease_owner="")
            if self.then_stop:
                self.set()
        return self.is_set()


def _another_workers_batch_in_flight():
    run = make_run()
    (task,) = make_tasks(run, 1)
    assert [c.task_id for c in leases.claim("w-other", 1)] == [task.pk]
    return task


def test_until_idle_polls_every_tenth_of_a_second_while_another_batch_is_in_flight():
    task = _another_workers_batch_in_flight()
    stop = RecordingStop(task.pk, polls=8, then_stop=False)

    stats = worker.run_forever("w-idle", until_idle=True, idle_wait=3600, stop=stop)

    assert stats.claims == 0
    assert len(stop.waits) == 8  # it left at the first poll after the other batch's commit
    assert stop.waits[0] == 0.05
    assert max(stop.waits) == 0.1


def test_a_standing_loop_backs_off_to_one_poll_a_second():
    task = _another_workers_batch_in_flight()
    stop = RecordingStop(task.pk, polls=8, then_stop=True)

    worker.run_forever("w-standing", stop=stop)

    assert stop.waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
