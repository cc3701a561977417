"""Migration 0021: the URL trigram index lives on recovery_task_url_search, kept in step with
recovery_task by triggers (PostgreSQL; SQLite has neither, and searches by URL prefix)."""

from __future__ import annotations

import pytest
from django.db import connection

from dashboard.filtersets import TRIGRAM_INDEX, URL_SEARCH_TABLE
from recovery import leases
from recovery.models import Task
from tests.support.factories import make_run, make_tasks
from tests.support.migrations import migrate, migrate_to_latest

pytestmark = pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="the side table and pg_trgm are PostgreSQL's"
)


def mirrored() -> dict[int, str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT task_id, url FROM {URL_SEARCH_TABLE}")
        return dict(cursor.fetchall())


def tables_indexed_by_trigrams() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = x.relam JOIN pg_class c ON c.oid = i.indrelid "
            "WHERE a.amname = 'gin' AND x.relname = %s",
            [TRIGRAM_INDEX],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_it_keeps_the_trigram_index_off_the_task_table():
    # A claim and a commit are never HOT updates: an index on recovery_task is written twice
    # per task; on the side table, once, when the task is created.
    assert tables_indexed_by_trigrams() == [URL_SEARCH_TABLE]


@pytest.mark.django_db
def test_it_mirrors_created_tasks_and_forgets_deleted_ones():
    run = make_run()
    tasks = make_tasks(run, 5)  # one bulk INSERT
    one = Task.objects.create(run=run, task_key="k" * 64, url="http://shop.test/one")
    assert mirrored() == {t.pk: t.url for t in [*tasks, one]}

    Task.objects.filter(pk__in=[tasks[0].pk, tasks[1].pk]).delete()
    assert set(mirrored()) == {t.pk for t in [*tasks[2:], one]}
    run.delete()  # the cascade to the run's tasks
    assert mirrored() == {}


@pytest.mark.django_db
def test_claim_and_commit_leave_it_alone_and_a_changed_url_follows():
    run = make_run()
    (task,) = make_tasks(run, 1)
    claimed = leases.claim("w1", 1)
    assert [c.task_id for c in claimed] == [task.pk]
    assert mirrored() == {task.pk: task.url}

    Task.objects.filter(pk=task.pk).update(url="http://shop.test/moved")
    assert mirrored() == {task.pk: "http://shop.test/moved"}


@pytest.mark.django_db(transaction=True)  # committed rows: no deferred checks pending
def test_a_truncate_of_the_tasks_empties_it():
    # As Django's flush between transactional tests does (no CASCADE to a table it knows not).
    make_tasks(make_run(), 3)
    assert len(mirrored()) == 3
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE recovery_task CASCADE")
    assert mirrored() == {}


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_the_index_and_back():
    make_tasks(make_run(), 3)
    migrate([("recovery", "0020_drop_unused_like_indexes")])
    try:
        assert tables_indexed_by_trigrams() == ["recovery_task"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s)", [URL_SEARCH_TABLE])
            assert cursor.fetchone()[0] is None
    finally:
        migrate_to_latest()
    assert tables_indexed_by_trigrams() == [URL_SEARCH_TABLE]
    assert mirrored() == dict(Task.objects.values_list("pk", "url"))  # backfilled
    assert len(mirrored()) == 3
