"""The hot path on SQLite: a claim is a short BEGIN IMMEDIATE transaction (a SELECT and an
UPDATE ... RETURNING under the database's only write lock), the commit one transaction of
multi-row statements, each retried on "database is locked"."""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from django.db import OperationalError, connection, transaction
from django.db.backends.utils import CursorWrapper

from recovery import counters, faults
from recovery.counters import Change
from recovery.delivery import corrections
from recovery.leases.plan import (
    WORKER,
    Claimed,
    CommitSummary,
    Holder,
    Plan,
    claimed_from_row,
    discovered_children,
    lost_detail,
    observation_rows,
    page_incidents,
)
from recovery.leases.statements import (
    CHUNK,
    DEFERRED_FIRST_ATTEMPT,
    LEASED_SQL,
    SQLITE_NOW,
    TASK_COLS,
    TimeParam,
    dt_param,
    due_sql,
    is_suspect,
    plus_seconds_sql,
    upsert_observations,
    upsert_worker_sql,
    values_sql,
)
from recovery.ops import incidents
from recovery.outcomes import Outcome
from recovery.states.choices import TaskState

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def retry_locked(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a short write transaction, retrying SQLite's "database is locked".

    The busy timeout (30 s) already queues writers; this only covers the rare give-up under
    heavy load. Nothing was committed when the error is raised, so a retry is safe.
    """
    delay = 0.05
    for attempt in range(8):
        try:
            return fn(*args, **kwargs)
        except OperationalError as exc:
            if "locked" not in str(exc) or attempt == 7 or connection.in_atomic_block:
                raise
            log.warning("database is locked; retrying in %.2fs", delay)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


def claim(worker_id: str, limit: int, lease: int) -> list[Claimed]:
    # BEGIN IMMEDIATE (settings: transaction_mode) holds the only write lock from the first
    # statement, so the SELECT and the UPDATE see and change the same rows: no SKIP LOCKED
    # needed, and the old state read here is the state the UPDATE replaces.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, state, lease_owner, crash_count FROM recovery_task "
            f"WHERE {due_sql(pg=False)} "
            f"ORDER BY priority DESC, next_attempt_at LIMIT %s",
            [limit],
        )
        due = cursor.fetchall()
        if not due:
            return []
        suspects = [row for row in due if is_suspect(row[1], row[3])]
        # A page that may have killed a worker is claimed alone (statements.is_suspect).
        previous = {row[0]: row[1:3] for row in (suspects[:1] or due)}
        ids = list(previous)
        marks = ", ".join(["%s"] * len(ids))
        lease_expr = (
            "(SELECT COALESCE(d.lease_seconds, d.lease_auto_seconds, %s) FROM recovery_run r "
            "JOIN recovery_dataset d ON d.id = r.dataset_id WHERE r.id = recovery_task.run_id)"
        )
        until = plus_seconds_sql(lease_expr)
        cursor.execute(
            f"UPDATE recovery_task SET state = {LEASED_SQL}, lease_owner = %s, "
            f"lease_until = {until}, next_attempt_at = {until}, "
            f"lease_token = lease_token + 1, attempt_count = attempt_count + 1, "
            f"crash_count = crash_count + (state = {LEASED_SQL}), "
            f"first_attempt_at = COALESCE(first_attempt_at, {SQLITE_NOW}), "
            f"state_changed_at = {SQLITE_NOW} "
            f"WHERE id IN ({marks}) "
            f"RETURNING {TASK_COLS.replace('t.', '')}",
            [worker_id, lease, lease, *ids],
        )
        rows = cursor.fetchall()
        run_ids = sorted({row[2] for row in rows})
        cursor.execute(
            'SELECT r.id, d.id, d.name, d.provider, r."window", r.scraper_version, '
            "COALESCE(d.lease_seconds, d.lease_auto_seconds, %s), d.max_attempts, "
            "d.max_elapsed_seconds "
            "FROM recovery_run r JOIN recovery_dataset d ON d.id = r.dataset_id "
            f"WHERE r.id IN ({', '.join(['%s'] * len(run_ids))})",
            [lease, *run_ids],
        )
        runs = {row[0]: row[1:] for row in cursor.fetchall()}
        claimed = [
            claimed_from_row((*row, *previous[row[0]], *runs[row[2]]), lease) for row in rows
        ]
        _record_claim_counters(claimed)
        _record_takeovers(cursor, worker_id, claimed)
    return claimed


def _record_claim_counters(claimed: list[Claimed]) -> None:
    # pending/retry_wait -> leased changes the counts; an expired lease re-claimed
    # (leased -> leased) does not.
    changes: dict[tuple[int, str, str], int] = defaultdict(int)
    for c in claimed:
        if c.previous_state != TaskState.LEASED:
            changes[(c.run_id, c.partition, c.previous_state)] += 1
    counters.record(
        (run_id, partition, old, TaskState.LEASED, n)
        for (run_id, partition, old), n in changes.items()
    )


def _record_takeovers(cursor: CursorWrapper, worker_id: str, claimed: list[Claimed]) -> None:
    """An expired lease taken over means its holder never committed (it crashed, stalled or
    lost its database): record that attempt as lost_lease now, so every execution stays
    traceable (guarantee 3) even when its worker died before writing anything."""
    taken = [c for c in claimed if c.previous_state == TaskState.LEASED and c.previous_owner]
    if not taken:
        return
    now = datetime.now(UTC)
    rows = []
    for c in taken:
        old = Claimed(**{f: getattr(c, f) for f in Claimed.__slots__})
        old.lease_token = c.lease_token - 1
        old.started_at = now
        plan = Plan(old, Outcome(), TaskState.LEASED, "lost_lease", "", "", None, None)
        detail = f"lease expired without a commit; taken over by {worker_id}"
        rows.append((plan, "lost_lease", detail, c.previous_owner))
    _insert_attempts(cursor, rows, now)


def heartbeat_rows(worker_id: str, claimed: Sequence[Claimed]) -> set[int]:
    held: set[int] = set()
    with transaction.atomic(), connection.cursor() as cursor:
        for c in claimed:
            until = plus_seconds_sql("%s")
            cursor.execute(
                f"UPDATE recovery_task SET lease_until = {until}, next_attempt_at = {until} "
                f"WHERE id = %s AND lease_token = %s AND lease_owner = %s AND state = {LEASED_SQL} "
                "RETURNING id",
                [c.lease_seconds, c.lease_seconds, c.task_id, c.lease_token, worker_id],
            )
            held.update(row[0] for row in cursor.fetchall())
    return held


def _fence(
    cursor: CursorWrapper, worker_id: str, plans: list[Plan], holder: Holder = WORKER
) -> set[int]:
    """The fenced UPDATE for every task of the batch, first, so a stale worker writes nothing.

    Each row matches only while its holder still holds it (state = leased and owner = us, or
    state = remote and the job is ours) and lease_token = our token.
    """
    params: list[Any] = []
    for p in plans:
        # SQLite date modifiers want plain decimal text.
        delay = None if p.delay is None else f"{p.delay:.6f}"
        params += [
            p.claimed.task_id,
            p.claimed.lease_token,
            p.state,
            delay,
            p.error_class,
            p.outcome.http_status,
            1 if p.deferred else 0,
        ]
    later = plus_seconds_sql("v.delay")
    values = values_sql(len(plans), ("",) * 7)
    held, held_params = holder.sql("recovery_task", worker_id)
    sql = (
        f"WITH v(id, token, state, delay, error_class, http_status, deferred) AS (VALUES {values}) "
        f"UPDATE recovery_task SET state = v.state, lease_owner = '', lease_until = NULL, "
        f"remote_job_id = NULL, "
        f"next_attempt_at = CASE WHEN v.delay IS NULL THEN recovery_task.next_attempt_at "
        f"ELSE {later} END, "
        f"last_error_class = v.error_class, last_http_status = v.http_status, "
        f"deferred_count = recovery_task.deferred_count + v.deferred, "
        f"first_attempt_at = {DEFERRED_FIRST_ATTEMPT.format(t='recovery_task')}, "
        f"state_changed_at = {SQLITE_NOW} "
        f"FROM v WHERE recovery_task.id = v.id AND recovery_task.lease_token = v.token "
        f"AND {held} RETURNING recovery_task.id"
    )
    cursor.execute(sql, [*params, *held_params])
    return {row[0] for row in cursor.fetchall()}


def _insert_attempts(
    cursor: CursorWrapper, rows: list[tuple[Plan, str, str, str]], finished: datetime
) -> None:
    """Attempt rows: (plan, outcome, error_detail, worker) — one multi-row INSERT per chunk."""
    casts = ("",) * 15
    finished_param = dt_param(finished)
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start : start + CHUNK]
        params: list[Any] = []
        for plan, outcome, detail, worker_id in chunk:
            c = plan.claimed
            params += [
                plan.attempt_id.hex,
                c.task_id,
                c.run_id,
                c.recovery_batch_id,
                c.lease_token,
                worker_id,
                c.scraper_version,
                dt_param(c.started_at),
                finished_param,
                plan.outcome.http_status,
                json.dumps(plan.artefact) if plan.artefact is not None else None,
                outcome,
                plan.error_class,
                detail,
                plan.payload_hash,
            ]
        cursor.execute(
            "INSERT INTO recovery_attempt (id, task_id, run_id, recovery_batch_id, lease_token, "
            "worker, scraper_version, started_at, finished_at, http_status, artefact, outcome, "
            f"error_class, error_detail, payload_hash) VALUES {values_sql(len(chunk), casts)}",
            params,
        )


def _insert_children(
    cursor: CursorWrapper, plans: list[Plan], now_param: TimeParam
) -> tuple[int, list[Change]]:
    """Discovered URLs become tasks in the parent's transaction (the task table is the seen
    set: ON CONFLICT (task_key) DO NOTHING). Returns (new tasks, counter changes)."""
    rows: dict[str, list[Any]] = {}
    for plan in plans:
        for child in discovered_children(plan):
            rows.setdefault(
                child.task_key,
                [
                    child.run_id,
                    child.task_key,
                    child.url,
                    child.page_type,
                    child.partition,
                    child.priority,
                    child.discovery,
                    child.parent_id,
                    child.depth,
                    child.navigation_json,
                    "pending",
                    0,
                    now_param,
                    "",
                    None,
                    0,
                    None,
                    "",
                    None,
                    child.recovery_batch_id,
                    now_param,
                    now_param,
                ],
            )
    if not rows:
        return 0, []
    casts = ("",) * 22
    ordered = [rows[k] for k in sorted(rows)]  # same lock order in every committer
    inserted: list[tuple[int, str]] = []
    for start in range(0, len(ordered), CHUNK):
        chunk = ordered[start : start + CHUNK]
        cursor.execute(
            "INSERT INTO recovery_task (run_id, task_key, url, page_type, partition, priority, "
            "discovery, parent_id, depth, navigation, state, attempt_count, next_attempt_at, "
            "lease_owner, lease_until, lease_token, first_attempt_at, last_error_class, "
            "last_http_status, recovery_batch_id, created_at, state_changed_at) "
            f"VALUES {values_sql(len(chunk), casts)} "
            "ON CONFLICT (task_key) DO NOTHING RETURNING run_id, partition",
            [v for row in chunk for v in row],
        )
        inserted += cursor.fetchall()
    per_run: dict[int, int] = defaultdict(int)
    per_part: dict[tuple[int, str], int] = defaultdict(int)
    for run_id, partition in inserted:
        per_run[run_id] += 1
        per_part[(run_id, partition)] += 1
    for run_id, n in sorted(per_run.items()):
        cursor.execute(
            "UPDATE recovery_run SET task_total = task_total + %s WHERE id = %s", [n, run_id]
        )
    changes: list[Change] = [
        (run_id, part, None, TaskState.PENDING, n) for (run_id, part), n in per_part.items()
    ]
    return len(inserted), changes


def commit(worker_id: str, plans: list[Plan], finished: datetime, holder: Holder) -> CommitSummary:
    summary = CommitSummary()
    now_param = dt_param(finished)
    with transaction.atomic(), connection.cursor() as cursor:
        fenced = _fence(cursor, worker_id, plans, holder)
        won = [p for p in plans if p.claimed.task_id in fenced]
        lost = [p for p in plans if p.claimed.task_id not in fenced]
        obs_rows = observation_rows(plans)  # also sets every plan's payload_hash
        won_ids = {id(p) for p in won}
        attempt_rows = [(p, p.attempt_outcome, p.error_detail, worker_id) for p in won]
        # A lost lease still leaves a traceable Attempt (guarantee 3), but none of its writes:
        # no observation, no child, no state change.
        attempt_rows += [(p, "lost_lease", lost_detail(p), worker_id) for p in lost]
        if attempt_rows:
            _insert_attempts(cursor, attempt_rows, finished)
        incidents.record_pages(page_incidents(won), finished)
        obs_rows = [r for r in obs_rows if id(r.plan) in won_ids]
        # A changed value of a published run becomes a versioned correction (not an overwrite).
        obs_rows = corrections.divert_published(obs_rows)
        if obs_rows:
            summary.observations = upsert_observations(cursor, obs_rows, now_param)
        summary.discovered, child_changes = _insert_children(
            cursor, [p for p in won if p.outcome.discovered], now_param
        )
        moves: dict[tuple[int, str, str], int] = defaultdict(int)
        for p in won:
            moves[(p.claimed.run_id, p.claimed.partition, p.state)] += 1
            summary.states[p.state] = summary.states.get(p.state, 0) + 1
        counters.record(
            [(run_id, part, holder.source, state, n) for (run_id, part, state), n in moves.items()]
            + child_changes
        )
        cursor.execute(
            upsert_worker_sql(),
            [worker_id, socket.gethostname()[:200], os.getpid(), len(plans), len(won)],
        )
        summary.lost = [p.claimed.task_id for p in lost]
        faults.point("in_commit")
    return summary
