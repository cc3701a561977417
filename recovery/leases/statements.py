"""SQL both databases' statements share: the database clock, parameters, multi-row VALUES,
the state literals (from recovery.states.task, never spelled here), the observation upsert
and the worker's heartbeat row."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.backends.utils import CursorWrapper

from recovery.delivery.corrections import ObservationRow
from recovery.states.choices import CLAIMABLE_ORDER, TaskState
from recovery.states.task import sql_list

# Django stores SQLite datetimes as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'; this is the SQL
# clock in the same shape (milliseconds), so text comparison orders them correctly.
# '%%' because Django's SQLite cursor turns '%%' into '%' when parameters are passed.
SQLITE_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


CLAIMABLE_SQL = sql_list(CLAIMABLE_ORDER)


# 'leased' and 'pending' as SQL literals, spelled once (recovery.states.task).
LEASED_SQL = sql_list([TaskState.LEASED])[1:-1]


PENDING_SQL = sql_list([TaskState.PENDING])[1:-1]


CHUNK = 500  # rows per multi-row INSERT (far below both databases' parameter limits)


TASK_COLS = (
    "t.id, t.task_key, t.run_id, t.url, t.page_type, t.partition, t.depth, t.navigation, "
    "t.attempt_count, t.lease_token, t.first_attempt_at, t.recovery_batch_id, t.crash_count, "
    "t.deferred_count"
)


# The fence's first_attempt_at (both databases, `{t}` the task table's name in the statement,
# `v.deferred` 1 for a deferral): a deferral made before any counted attempt clears it, so the
# elapsed budget starts at the first attempt that counts (plan.plan_outcome's deferral). The
# SET sees the row as the claim left it: attempt_count includes this claim.
DEFERRED_FIRST_ATTEMPT = (
    "CASE WHEN v.deferred = 1 AND {t}.attempt_count - {t}.crash_count - {t}.deferred_count <= 1 "
    "THEN NULL ELSE {t}.first_attempt_at END"
)


def is_suspect(state: str, crash_count: int) -> bool:
    """A due task that may kill its worker: its lease expired without a commit (state still
    leased), or that already happened once. The claim hands such a task out alone, so when
    its worker dies again the crash is its own and not its batch neighbours' (a batch of 50
    killed by one poison page would otherwise spend 49 innocent pages' crash budgets too).
    The PostgreSQL claim spells the same test in SQL (postgres.CLAIM_SQL)."""
    return state == TaskState.LEASED or crash_count > 0


def is_pg() -> bool:
    return connection.vendor == "postgresql"


def now_sql() -> str:
    return "statement_timestamp()" if is_pg() else SQLITE_NOW


def due_sql(*, pg: bool | None = None, ahead: bool = False) -> str:
    """When a task is due, spelled once: the claim selects by it, the dispatcher counts it and
    the worker's idle check probes it, so none of them wakes for work the claim would not take.

    A claimable state (task_claim_idx's condition, so the index serves all three) whose
    next_attempt_at the database clock has reached; a leased task whose lease ran out is due
    too, since a claim sets next_attempt_at to lease_until. On SQLite the clock is the end of
    the current millisecond: rows written by Python carry microseconds, and a task made due
    "now" must not wait for the next millisecond. `ahead`: the clock moved on by a %s
    parameter of seconds (due within that time). `pg`: which database (default: this one's),
    for a statement built at import."""
    if pg is None:
        pg = is_pg()
    if pg:
        clock = "statement_timestamp()" + (" + make_interval(secs => %s)" if ahead else "")
    else:
        shift = ", '+' || %s || ' seconds'" if ahead else ""
        clock = f"(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'{shift}) || '999')"
    return f"state IN {CLAIMABLE_SQL} AND next_attempt_at <= {clock}"


def plus_seconds_sql(expr: str) -> str:
    """SQL for database-now + `expr` seconds (expr is SQL yielding a number)."""
    if is_pg():
        return f"(statement_timestamp() + make_interval(secs => ({expr})::double precision))"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || ({expr}) || ' seconds')"


# A datetime as a raw statement's parameter: UTC text on SQLite, the datetime itself on
# PostgreSQL (whose adapter django-stubs does not override: its base says text).
TimeParam = str | datetime | None


def dt_param(value: datetime | None) -> TimeParam:
    return connection.ops.adapt_datetimefield_value(value)


def values_sql(n_rows: int, casts: Sequence[str]) -> str:
    """'(%s, %s::bigint, ...), (...)' — casts only on PostgreSQL, where VALUES needs types."""
    if is_pg():
        one = "(" + ", ".join(f"%s{c}" if c else "%s" for c in casts) + ")"
    else:
        one = "(" + ", ".join(["%s"] * len(casts)) + ")"
    return ", ".join([one] * n_rows)


def upsert_observations(
    cursor: CursorWrapper, rows: list[ObservationRow], now_param: TimeParam
) -> int:
    pg = is_pg()
    json_mark = "::jsonb" if pg else ""
    casts = ("",) * 5 + (json_mark,) + ("",) * 11
    changed = 0
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start : start + CHUNK]
        params: list[Any] = []
        for row in chunk:
            c = row.plan.claimed
            params += [
                c.run_id,
                row.observation_key,
                row.entity_key[:500],
                c.window,
                c.partition,
                row.payload_json,
                row.payload_hash,
                c.task_id,
                c.task_key,
                row.plan.attempt_id if pg else row.plan.attempt_id.hex,
                c.scraper_version,
                row.verdict,
                row.rules_digest,
                row.state,
                1,
                now_param,
                now_param,
            ]
        # Upsert by observation_key; only a changed payload rewrites the row (and sends it
        # back to validation), so a repeated execution is a no-op for the data.
        cursor.execute(
            'INSERT INTO recovery_observation (run_id, observation_key, entity_key, "window", '
            "partition, payload, payload_hash, source_task_id, source_task_key, "
            "source_attempt_id, scraper_version, verdict, verdict_rules, validation_state, "
            "version, observed_at, updated_at) "
            f"VALUES {values_sql(len(chunk), casts)} "
            "ON CONFLICT (observation_key) DO UPDATE SET payload = excluded.payload, "
            "payload_hash = excluded.payload_hash, partition = excluded.partition, "
            "source_task_id = excluded.source_task_id, "
            "source_task_key = excluded.source_task_key, "
            "source_attempt_id = excluded.source_attempt_id, "
            "scraper_version = excluded.scraper_version, verdict = excluded.verdict, "
            "verdict_rules = excluded.verdict_rules, "
            "validation_state = excluded.validation_state, updated_at = excluded.updated_at "
            "WHERE recovery_observation.payload_hash <> excluded.payload_hash RETURNING 1",
            params,
        )
        changed += len(cursor.fetchall())
    return changed


def upsert_worker_sql() -> str:
    now = now_sql()
    return (
        "INSERT INTO recovery_workerheartbeat "
        "(worker, hostname, pid, started_at, last_seen, claimed, committed) "
        f"VALUES (%s, %s, %s, {now}, {now}, %s, %s) "
        "ON CONFLICT (worker) DO UPDATE SET last_seen = excluded.last_seen, "
        "pid = excluded.pid, "
        "claimed = recovery_workerheartbeat.claimed + excluded.claimed, "
        "committed = recovery_workerheartbeat.committed + excluded.committed"
    )


def touch_worker_row(worker_id: str, claimed: int = 0, committed: int = 0) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            upsert_worker_sql(),
            [worker_id, socket.gethostname()[:200], os.getpid(), claimed, committed],
        )
