"""PostgreSQL: the unique keys written on every page keep their unique index and carry no
`varchar_pattern_ops` ("_like") index (migration 0020; issue 15: one index entry fewer per
task move and per observation insert)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from recovery.models import Task
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db

COLUMNS = [
    ("recovery_task", "task_key"),
    ("recovery_observation", "observation_key"),
    ("recovery_workerheartbeat", "worker"),
]


def indexes_on(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            [table, f"%({column}%"],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(("table", "column"), COLUMNS)
def test_no_pattern_index_and_the_unique_index_stays(table, column):
    defs = indexes_on(table, column)
    assert not [d for d in defs if "pattern_ops" in d], defs
    assert [d for d in defs if d.startswith("CREATE UNIQUE INDEX")], defs


def test_a_duplicate_task_key_is_still_refused():
    task = make_tasks(make_run(), 1)[0]
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(run=task.run, task_key=task.task_key, url=task.url)
