"""The engine's loops drive acceptance: `work --until-idle` ends with the run judged."""

from __future__ import annotations

import pytest

from recovery import dispatch, tasks, worker
from recovery.models import OutboxEvent, Run
from recovery.quality import acceptance, acceptance_steps
from recovery.states.choices import RunState
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db

SPEC = {
    "provider": "noop",
    "page_types": {"product": {"fields": {"url": {"selector": "a"}}}},
    "entity_key": {"from": "url"},
    "partition": {"rule": "host"},
    "rules": [{"name": "coverage", "kind": "coverage", "min": 1.0}],
}


def test_it_is_registered_in_the_worker_and_the_dispatcher():
    assert acceptance_steps.advance_step in worker.STEPS
    assert acceptance_steps.advance_before_idle in worker.IDLE_CHECKS
    assert acceptance_steps.dispatch_hook in dispatch.TICK_HOOKS


@pytest.mark.django_db(transaction=True)
def test_work_until_idle_leaves_an_auto_accepted_run(settings):
    settings.SALVAGE_OUTBOX_WAKE = False
    dataset = make_dataset(auto_accept=True)
    dataset.spec.update(SPEC)
    dataset.save(update_fields=["spec"])
    run = make_run(dataset)
    make_tasks(run, 5)
    worker.run_until_idle("w-hooks")
    run = Run.objects.get(pk=run.pk)
    assert run.acceptance_state == RunState.ACCEPTED
    assert OutboxEvent.objects.filter(run=run, event_type="accepted").count() == 1


def test_a_dispatcher_tick_wakes_advance_and_delivery_without_doing_them(settings, monkeypatch):
    settings.SALVAGE_OUTBOX_WAKE = False
    sent = []
    monkeypatch.setattr("django_q.tasks.async_task", lambda func, **kw: sent.append(func))
    monkeypatch.setattr(acceptance_steps, "_last", dict.fromkeys(acceptance_steps._last, 0.0))
    dataset = make_dataset()
    dataset.spec.update(SPEC, rules=[])
    dataset.save(update_fields=["spec"])
    run = make_run(dataset)
    make_tasks(run, 2, state="committed")
    dispatch.tick()
    assert sent == ["recovery.tasks.advance_runs"]
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.COLLECTING  # only woken
    tasks.advance_runs()  # what the django-q2 worker runs
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.CANDIDATE
    acceptance.accept_run(run.pk, "admin")
    monkeypatch.setattr(acceptance_steps, "_last", dict.fromkeys(acceptance_steps._last, 0.0))
    dispatch.tick()
    assert sent[-1] == "recovery.tasks.deliver_due"
