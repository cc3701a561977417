"""Plain factory functions for tests: make_thing(**overrides)."""

from __future__ import annotations

import itertools

from django.utils import timezone

from recovery import counters, keys
from recovery.leases import canonical_json
from recovery.models import Dataset, Observation, Run, Task

_seq = itertools.count(1)

DEFAULT_SPEC = {
    "name": "shop",
    "provider": "noop",
    "page_types": {"product": {"fields": {"title": {"selector": "h1", "required": True}}}},
    "entity_key": {"from": "url"},
    "partition": {"rule": "host"},
}


def make_dataset(**overrides) -> Dataset:
    n = next(_seq)
    spec = dict(DEFAULT_SPEC, name=overrides.pop("name", f"shop{n}"))
    values = {"name": spec["name"], "spec": spec, "spec_sha256": "0" * 64, "provider": "noop"}
    values.update(overrides)
    return Dataset.objects.create(**values)


def make_run(dataset: Dataset | None = None, **overrides) -> Run:
    dataset = dataset or make_dataset()
    values = {"dataset": dataset, "window": f"2026-11-{next(_seq) % 28 + 1:02d}-{next(_seq)}"}
    values.update(overrides)
    return Run.objects.create(**values)


def make_tasks(
    run: Run,
    n: int,
    *,
    partition: str = "p1",
    page_type: str = "product",
    state: str = "pending",
    host: str = "shop.test",
) -> list[Task]:
    start = Task.objects.filter(run=run).count()
    tasks = []
    for i in range(start, start + n):
        url = f"http://{host}/item/{i}"
        tasks.append(
            Task(
                run=run,
                task_key=keys.task_key(run.dataset.name, url, run.window, page_type),
                url=keys.canonical_url(url),
                page_type=page_type,
                partition=partition,
                state=state,
                next_attempt_at=timezone.now(),
            )
        )
    Task.objects.bulk_create(tasks, batch_size=1000)
    counters.record([(run.pk, partition, None, state, n)])
    run.task_total = Task.objects.filter(run=run).count()
    run.save(update_fields=["task_total"])
    return list(Task.objects.filter(run=run, partition=partition).order_by("pk"))[-n:]


def force_state(task: Task, target: str, **fields) -> Task:
    """Put a task in `target` for a test's setup (not a move under test: those go through
    recovery.states.task and recovery.leases), keeping the run's counters exact."""
    task.refresh_from_db()
    Task.objects.filter(pk=task.pk).update(state=target, **fields)
    counters.record([(task.run_id, task.partition, task.state, target, 1)])
    task.refresh_from_db()
    return task


def make_observation(
    run: Run, task: Task, payload: dict, *, state: str = Observation.Validation.VALID
) -> Observation:
    """One observation of `task` (keyed by its URL) in the task's partition, stored with the
    verdict `state`; its payload_hash is computed as the commit computes it."""
    return Observation.objects.create(
        run=run,
        observation_key=keys.observation_key(run.dataset.name, task.url, run.window),
        entity_key=task.url,
        window=run.window,
        partition=task.partition,
        payload=payload,
        payload_hash=keys.payload_hash(canonical_json(payload)),
        source_task=task,
        validation_state=state,
    )
