"""A recovery batch's tasks on the run's task list (`?batch=`), linked from the batch page: the
page and its CSV list exactly the tasks the batch reset, no other (issue 29)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from recovery.models import Task
from recovery.quality import reruns
from recovery.states.choices import TaskState
from tests.support.factories import force_state, make_run, make_tasks
from tests.support.list_csv import list_rows
from tests.support.world import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def batches():
    run = make_run()
    for partition in ("a", "b", "c"):
        for task in make_tasks(run, 4, partition=partition, host=f"{partition}.test"):
            force_state(task, TaskState.DEAD, last_error_class="parse_error")
    first = reruns.create_recovery_batch(
        run.pk, partitions=["b"], reason="selector", scraper_version="2", actor="ada"
    )
    second = reruns.create_recovery_batch(
        run.pk, partitions=["c"], reason="selector", scraper_version="2", actor="ada"
    )
    return run, first, second


def listed_ids(response) -> list[int]:
    return [int(i) for i in re.findall(r'href="/tasks/(\d+)/"', response.content.decode())]


def test_the_batch_filter_lists_the_batchs_tasks_and_no_other(batches):
    run, first, second = batches
    client = Client()
    client.force_login(make_user("olivia", "operator"))
    for batch in (first, second):
        expected = sorted(Task.objects.filter(recovery_batch=batch).values_list("pk", flat=True))
        assert len(expected) == 4
        url = reverse("dashboard:run_tasks", args=[run.pk]) + f"?batch={batch.pk}"
        page = client.get(url)
        assert page.status_code == 200
        assert sorted(set(listed_ids(page))) == expected

        export_url = reverse("dashboard:run_tasks_csv", args=[run.pk])
        export = client.get(f"{export_url}?batch={batch.pk}")
        rows = list_rows(b"".join(export.streaming_content))
        assert sorted(int(row["id"]) for row in rows) == expected


def test_the_batch_page_links_to_its_tasks(batches):
    run, first, _ = batches
    client = Client()
    client.force_login(make_user("olivia", "operator"))
    page = client.get(reverse("dashboard:batch", args=[first.pk])).content.decode()
    link = re.search(r'<a id="batch-tasks" href="([^"]+)"', page)
    assert link is not None
    assert link.group(1) == reverse("dashboard:run_tasks", args=[run.pk]) + f"?batch={first.pk}"


def test_a_batch_filter_that_is_not_a_number_is_refused_by_name(batches):
    run, *_ = batches
    client = Client()
    client.force_login(make_user("olivia", "operator"))
    response = client.get(reverse("dashboard:run_tasks", args=[run.pk]) + "?batch=first")
    assert response.status_code == 400
    assert b"batch" in response.content
