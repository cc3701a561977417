"""Factories for acceptance, rerun, outbox and export tests (helper "accept").

`commit_task()` stands in for the engine's fenced commit (claim -> attempt + observation upsert
-> committed) using the state-machine functions, so these tests do not depend on the worker.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from recovery import keys
from recovery.delivery import corrections
from recovery.models import Attempt, Dataset, Observation, Run, Task
from recovery.states.choices import TaskState
from tests.support.factories import force_state, make_dataset, make_run, make_tasks

SHOP_SPEC: dict[str, Any] = {
    "name": "prices",
    "provider": "noop",
    "scraper_version": "1",
    "auto_accept": False,
    "entity_key": {"field": "sku"},
    "partition": {"rule": "host"},
    "page_types": {
        "product": {
            "fields": {
                "title": {"selector": "h1", "required": True},
                "price": {"selector": ".price", "type": "decimal", "required": True},
                "sku": {"selector": "[data-sku]", "attr": "data-sku", "required": True},
            }
        }
    },
    "rules": [
        {"name": "coverage", "kind": "coverage", "min": 0.9},
        {"name": "price_positive", "kind": "range", "field": "price", "min": 0.01},
        {"name": "sku_pattern", "kind": "pattern", "field": "sku", "pattern": "^SKU-[0-9]+$"},
        {
            "name": "partition_invalid_prices",
            "kind": "partition_invalid_share",
            "field": "price",
            "max": 0.05,
        },
    ],
}


def make_shop(name: str | None = None, **overrides) -> Dataset:
    spec = json.loads(json.dumps(SHOP_SPEC))
    spec["name"] = name or f"prices{uuid.uuid4().hex[:8]}"
    spec.update(overrides.pop("spec", {}))
    return make_dataset(name=spec["name"], spec=spec, **overrides)


def good_payload(task: Task) -> dict[str, Any]:
    return {"title": f"Item {task.pk}", "price": f"{10 + task.pk % 7}.50", "sku": f"SKU-{task.pk}"}


def bad_payload(task: Task) -> dict[str, Any]:
    return {"title": f"Item {task.pk}", "price": "0.00", "sku": f"SKU-{task.pk}"}


def commit_task(task: Task, payload: dict[str, Any], *, worker: str = "test") -> Attempt:
    """Claim a pending task and commit one observation for it, like the engine does."""
    task.refresh_from_db()
    token = task.lease_token + 1
    until = timezone.now() + timezone.timedelta(seconds=60)
    force_state(
        task,
        TaskState.LEASED,
        lease_until=until,
        attempt_count=task.attempt_count + 1,
        lease_owner=worker,
        lease_token=token,
    )
    run = Run.objects.select_related("dataset").get(pk=task.run_id)
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    digest = keys.payload_hash(body)
    with transaction.atomic():
        attempt = Attempt.objects.create(
            task=task,
            run=run,
            recovery_batch_id=task.recovery_batch_id,
            lease_token=token,
            worker=worker,
            outcome=Attempt.Outcome.COMMITTED,
            finished_at=timezone.now(),
            http_status=200,
            payload_hash=digest,
        )
        entity = str(payload.get("sku") or task.url)
        okey = keys.observation_key(run.dataset.name, entity, run.window)
        existing = Observation.objects.filter(observation_key=okey).first()
        if existing is None:
            Observation.objects.create(
                run=run,
                observation_key=okey,
                entity_key=entity,
                window=run.window,
                partition=task.partition,
                payload=payload,
                payload_hash=digest,
                source_task=task,
                source_attempt=attempt,
                scraper_version=run.scraper_version,
            )
        elif corrections.needs_version(run.acceptance_state):
            corrections.supersede(existing.pk, payload, digest, attempt.pk, reason="repair")
        elif existing.payload_hash != digest:
            Observation.objects.filter(pk=existing.pk).update(
                payload=payload,
                payload_hash=digest,
                source_attempt=attempt,
                validation_state=Observation.Validation.PENDING,
                updated_at=timezone.now(),
            )
        force_state(task, TaskState.COMMITTED, lease_owner="", lease_until=None)
    return attempt


def make_collected_run(
    partitions: dict[str, str], per_partition: int = 10, dataset: Dataset | None = None, **kw
) -> Run:
    """A collecting run whose tasks are all committed: {partition: "good" | "bad"}."""
    dataset = dataset or make_shop()
    run = make_run(dataset, **kw)
    for partition, quality in partitions.items():
        tasks = make_tasks(run, per_partition, partition=partition, host=f"{partition}.test")
        for task in tasks:
            commit_task(task, good_payload(task) if quality == "good" else bad_payload(task))
    return run


def lenient_shop() -> Dataset:
    """Coverage 0.6, so a run with one of three partitions held out can still be accepted."""
    dataset = make_shop()
    dataset.spec["rules"][0]["min"] = 0.6
    dataset.save(update_fields=["spec"])
    return dataset


def commit_claimed(worker: str, payload_for) -> list:
    """Claim every due task and commit it through the engine's fenced commit (leases)."""
    from recovery import leases
    from recovery.outcomes import Observed, Outcome

    claimed = leases.claim(worker, limit=500)
    outcomes = [
        Outcome(http_status=200, observations=[Observed(f"SKU-{c.task_id}", payload_for(c))])
        for c in claimed
    ]
    leases.commit_outcomes(worker, claimed, outcomes)
    return claimed
