"""Scratch PostgreSQL databases beside the test database, and a run's end state read with SQL.

The upgrade, restore and pooler tests run real processes against a database of their own (one
an older release migrated, one a backup was restored into). This test process reads it with
plain SQL through psycopg: the ORM's connection is the test database's, and an older
release's schema may not be the models' schema.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from django.db import connection


def server_url(database: str) -> str:
    """postgres://user[:password]@host:port/<database> on the test database's server."""
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{database}"


def drop_database(name: str) -> None:
    with psycopg.connect(server_url("postgres"), autocommit=True) as admin:
        # A process the test SIGKILLed may still hold a backend for a moment.
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


@contextlib.contextmanager
def scratch_database(suffix: str) -> Iterator[str]:
    """An empty database named after the test database (`<test db>_<suffix>`); its URL.
    Dropped afterwards, and first if a killed run left it behind."""
    name = f"{connection.settings_dict['NAME']}_{suffix}"
    drop_database(name)
    with psycopg.connect(server_url("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server_url(name)
    finally:
        drop_database(name)


def fetch(url: str, sql: str, params: list | None = None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params or []).fetchall()


@dataclass(frozen=True)
class RunEnd:
    """A run's tasks, observations and attempts as the database holds them."""

    tasks: dict[str, tuple[str, str | None]]  # url -> (state, last_error_class)
    observations: int
    observation_tasks: int  # distinct source tasks of those observations
    committed_attempts: Counter  # task id -> attempts that committed it
    reused_tokens: int  # (task, lease token) pairs used by more than one attempt
    attempt_workers: Counter  # worker id -> attempts


def run_end(url: str, run_id: int) -> RunEnd:
    tasks = {
        u: (state, error)
        for u, state, error in fetch(
            url,
            "SELECT url, state, last_error_class FROM recovery_task WHERE run_id = %s",
            [run_id],
        )
    }
    ((observations, observation_tasks),) = fetch(
        url,
        "SELECT count(*), count(DISTINCT source_task_id) FROM recovery_observation "
        "WHERE run_id = %s",
        [run_id],
    )
    committed = Counter(
        dict(
            fetch(
                url,
                "SELECT task_id, count(*) FROM recovery_attempt WHERE run_id = %s "
                "AND outcome = 'committed' GROUP BY task_id",
                [run_id],
            )
        )
    )
    ((reused,),) = fetch(
        url,
        "SELECT count(*) FROM (SELECT task_id, lease_token FROM recovery_attempt "
        "WHERE run_id = %s AND outcome <> 'lost_lease' GROUP BY task_id, lease_token "
        "HAVING count(*) > 1) AS twice",
        [run_id],
    )
    workers = Counter(
        dict(
            fetch(
                url,
                "SELECT worker, count(*) FROM recovery_attempt WHERE run_id = %s GROUP BY worker",
                [run_id],
            )
        )
    )
    return RunEnd(tasks, observations, observation_tasks, committed, reused, workers)


def committed_count(url: str, run_id: int) -> int:
    ((n,),) = fetch(
        url,
        "SELECT count(*) FROM recovery_task WHERE run_id = %s AND state = 'committed'",
        [run_id],
    )
    return n


def open_tasks(url: str, run_id: int) -> int:
    ((n,),) = fetch(
        url,
        "SELECT count(*) FROM recovery_task WHERE run_id = %s "
        "AND state IN ('pending', 'leased', 'retry_wait')",
        [run_id],
    )
    return n
