"""Identities are enforced by the database itself, not only by the code that writes rows."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from recovery import keys
from recovery.models import Attempt, Observation, RemoteJob, RemoteJobItem, Run, Task
from tests.support.factories import make_dataset, make_run, make_tasks

pytestmark = pytest.mark.django_db


def must_violate(fn) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        fn()


def make_job(run: Run, task: Task, **fields) -> RemoteJob:
    attempt = Attempt.objects.create(task=task, run=run, outcome=Attempt.Outcome.RUNNING)
    return RemoteJob.objects.create(
        attempt=attempt, run=run, provider="messora", kind="batch", **fields
    )


def test_a_task_key_exists_once_even_across_runs():
    run_a, run_b = make_run(), make_run()
    (task,) = make_tasks(run_a, 1)
    must_violate(lambda: Task.objects.create(run=run_b, task_key=task.task_key, url=task.url))
    assert Task.objects.filter(task_key=task.task_key).count() == 1


def test_a_task_key_exists_once_under_bulk_insert():
    run = make_run()
    key = keys.task_key(run.dataset.name, "http://x.test/", run.window, "product")
    must_violate(
        lambda: Task.objects.bulk_create(
            [Task(run=run, task_key=key, url="http://x.test/") for _ in range(2)]
        )
    )
    assert not Task.objects.filter(run=run).exists()


def test_an_observation_key_exists_once():
    run = make_run()
    (task,) = make_tasks(run, 1)
    key = keys.observation_key(run.dataset.name, "sku-1", run.window)
    values = dict(
        run=run,
        observation_key=key,
        entity_key="sku-1",
        window=run.window,
        payload={"p": 1},
        payload_hash="h",
        source_task=task,
    )
    Observation.objects.create(**values)
    must_violate(lambda: Observation.objects.create(**values))
    assert Observation.objects.filter(observation_key=key).count() == 1


def test_a_remote_job_item_index_is_committed_once():
    run = make_run()
    (task,) = make_tasks(run, 1)
    job = make_job(run, task)
    RemoteJobItem.objects.create(job=job, item_index=0, status="done")
    RemoteJobItem.objects.create(job=job, item_index=1, status="done")
    must_violate(lambda: RemoteJobItem.objects.create(job=job, item_index=0, status="done"))
    # Another job may use the same index.
    (task2,) = make_tasks(run, 1)
    RemoteJobItem.objects.create(job=make_job(run, task2), item_index=0, status="done")


def test_a_provider_job_id_belongs_to_one_remote_job():
    run = make_run()
    t1, t2, t3 = make_tasks(run, 3)
    make_job(run, t1, provider_job_id="job-1")
    must_violate(lambda: make_job(run, t2, provider_job_id="job-1"))
    # The same id at a different provider is a different job.
    attempt = Attempt.objects.create(task=t3, run=run, outcome=Attempt.Outcome.RUNNING)
    RemoteJob.objects.create(
        attempt=attempt, run=run, provider="tornado", kind="media", provider_job_id="job-1"
    )


def test_many_remote_jobs_may_wait_for_their_id():
    # The unique index is partial: NULL (id not known yet) never collides.
    run = make_run()
    for task in make_tasks(run, 3):
        make_job(run, task, provider_job_id=None)
    assert RemoteJob.objects.filter(provider_job_id__isnull=True).count() == 3


def test_an_attempt_has_at_most_one_remote_job():
    run = make_run()
    (task,) = make_tasks(run, 1)
    job = make_job(run, task)
    must_violate(
        lambda: RemoteJob.objects.create(
            attempt_id=job.attempt_id, run=run, provider="messora", kind="batch"
        )
    )


def test_a_dataset_has_one_run_per_window():
    dataset = make_dataset()
    Run.objects.create(dataset=dataset, window="w1")
    must_violate(lambda: Run.objects.create(dataset=dataset, window="w1"))
    Run.objects.create(dataset=make_dataset(), window="w1")
