"""Claim, heartbeat and fenced commit: the hot path of the engine (seed 002's protocol).

- `claim(worker_id, limit)` takes up to `limit` due tasks in one short transaction: PostgreSQL
  `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING`, SQLite a
  `BEGIN IMMEDIATE` transaction. A claim sets next_attempt_at = lease_until, so an expired
  lease is claimable through the same predicate and index (task_claim_idx): no reaper.
- `heartbeat(worker_id, claimed)` extends leases still held (owner + token match).
- `commit_outcomes(worker_id, claimed, outcomes)` writes each task's state, Attempt,
  observations and discovered children in one transaction, each task fenced by its own token.

Lease expiry is judged by the database clock (statement_timestamp() on PostgreSQL: the
statement's start, not the enclosing transaction's like now(); strftime('now') on SQLite),
never by a worker's. The statements are raw SQL: the ORM's per-row overhead was measured to be
a large share of a batch commit (research/perf-baselines.md). Counter deltas are recorded with
recovery.counters.record in the same transaction as the moves they count.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils.dateparse import parse_datetime

from recovery import corrections, counters, failures, faults, keys
from recovery.corrections import ObservationRow
from recovery.failures import Action
from recovery.providers.base import ErrorClass, Outcome, TaskInput
from recovery.states.task import CLAIMABLE_ORDER, TaskState, sql_list

log = logging.getLogger(__name__)

# Django stores SQLite datetimes as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'; this is the SQL
# clock in the same shape (milliseconds), so text comparison orders them correctly.
# '%%' because Django's SQLite cursor turns '%%' into '%' when parameters are passed.
_SQLITE_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
# "Due by now" compares against the end of the current millisecond: rows written by Python
# carry microseconds, and a task made due "now" must not wait for the next millisecond.
_SQLITE_DUE = "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') || '999')"

CLAIMABLE_SQL = sql_list(CLAIMABLE_ORDER)
# 'leased' and 'pending' as SQL literals, spelled once (recovery.states.task).
_LEASED = sql_list([TaskState.LEASED])[1:-1]
_PENDING = sql_list([TaskState.PENDING])[1:-1]
_CHUNK = 500  # rows per multi-row INSERT (far below both databases' parameter limits)


def _pg() -> bool:
    return connection.vendor == "postgresql"


def _now_sql() -> str:
    return "statement_timestamp()" if _pg() else _SQLITE_NOW


def _plus_seconds_sql(expr: str) -> str:
    """SQL for database-now + `expr` seconds (expr is SQL yielding a number)."""
    if _pg():
        return f"(statement_timestamp() + make_interval(secs => ({expr})::double precision))"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || ({expr}) || ' seconds')"


def _dt_param(value: datetime | None):
    return connection.ops.adapt_datetimefield_value(value)


def _dt_result(value) -> datetime | None:
    if value is None:
        return None
    # SQLite hands back naive UTC datetimes (or text, depending on the column's declared type).
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _json_value(value) -> dict:
    if value is None:
        return {}
    if isinstance(value, str):
        return json.loads(value)
    return value


def canonical_json(payload: Any) -> str:
    """The one JSON spelling of a payload that payload_hash is computed over."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _retry_locked(fn, *args, **kwargs):
    """Run a short write transaction, retrying SQLite's "database is locked".

    The busy timeout (30 s) already queues writers; this only covers the rare give-up under
    heavy load. Nothing was committed when the error is raised, so a retry is safe.
    """
    delay = 0.05
    for attempt in range(8):
        try:
            return fn(*args, **kwargs)
        except OperationalError as exc:
            if _pg() or "locked" not in str(exc) or attempt == 7 or connection.in_atomic_block:
                raise
            log.warning("database is locked; retrying in %.2fs", delay)
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


# --- claim -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Claimed:
    """One task as this worker holds it: what the provider needs and what the commit fences on."""

    task_id: int
    task_key: str
    run_id: int
    url: str
    page_type: str
    partition: str
    depth: int
    navigation: dict[str, Any]
    attempt_count: int
    lease_token: int
    previous_state: str
    previous_owner: str  # set when an expired lease was taken over (its token is ours - 1)
    first_attempt_at: datetime | None
    recovery_batch_id: int | None
    dataset_id: int
    dataset: str
    provider: str
    window: str
    scraper_version: str
    lease_seconds: int
    max_attempts: int
    max_elapsed_seconds: int
    # The worker's clock when the claim returned: the Attempt's started_at.
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def task_input(self, spec: dict[str, Any] | None = None) -> TaskInput:
        return TaskInput(
            task_id=self.task_id,
            task_key=self.task_key,
            run_id=self.run_id,
            url=self.url,
            page_type=self.page_type,
            partition=self.partition,
            window=self.window,
            dataset=self.dataset,
            attempt_count=self.attempt_count,
            lease_token=self.lease_token,
            depth=self.depth,
            navigation=dict(self.navigation),
            spec=spec or {},
        )


_TASK_COLS = (
    "t.id, t.task_key, t.run_id, t.url, t.page_type, t.partition, t.depth, t.navigation, "
    "t.attempt_count, t.lease_token, t.first_attempt_at, t.recovery_batch_id"
)


def _claimed_from_row(row, default_lease: int) -> Claimed:
    (
        task_id,
        task_key,
        run_id,
        url,
        page_type,
        partition,
        depth,
        navigation,
        attempt_count,
        lease_token,
        first_attempt_at,
        batch_id,
        previous_state,
        previous_owner,
        dataset_id,
        dataset,
        provider,
        window,
        scraper_version,
        lease_seconds,
        max_attempts,
        max_elapsed,
    ) = row
    return Claimed(
        task_id=task_id,
        task_key=task_key,
        run_id=run_id,
        url=url,
        page_type=page_type,
        partition=partition,
        depth=depth,
        navigation=_json_value(navigation),
        attempt_count=attempt_count,
        lease_token=lease_token,
        previous_state=previous_state,
        previous_owner=previous_owner if previous_state == TaskState.LEASED else "",
        first_attempt_at=_dt_result(first_attempt_at),
        recovery_batch_id=batch_id,
        dataset_id=dataset_id,
        dataset=dataset,
        provider=provider,
        window=window,
        scraper_version=scraper_version,
        lease_seconds=int(lease_seconds or default_lease),
        max_attempts=max_attempts,
        max_elapsed_seconds=max_elapsed,
    )


def _claim_sqlite(worker_id: str, limit: int, lease: int) -> list[Claimed]:
    # BEGIN IMMEDIATE (settings: transaction_mode) holds the only write lock from the first
    # statement, so the SELECT and the UPDATE see and change the same rows: no SKIP LOCKED
    # needed, and the old state read here is the state the UPDATE replaces.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, state, lease_owner FROM recovery_task "
            f"WHERE state IN {CLAIMABLE_SQL} AND next_attempt_at <= {_SQLITE_DUE} "
            f"ORDER BY priority DESC, next_attempt_at LIMIT %s",
            [limit],
        )
        previous = {row[0]: row[1:] for row in cursor.fetchall()}
        if not previous:
            return []
        ids = list(previous)
        marks = ", ".join(["%s"] * len(ids))
        lease_expr = (
            "(SELECT COALESCE(d.lease_seconds, %s) FROM recovery_run r "
            "JOIN recovery_dataset d ON d.id = r.dataset_id WHERE r.id = recovery_task.run_id)"
        )
        until = _plus_seconds_sql(lease_expr)
        cursor.execute(
            f"UPDATE recovery_task SET state = {_LEASED}, lease_owner = %s, "
            f"lease_until = {until}, next_attempt_at = {until}, "
            f"lease_token = lease_token + 1, attempt_count = attempt_count + 1, "
            f"first_attempt_at = COALESCE(first_attempt_at, {_SQLITE_NOW}), "
            f"state_changed_at = {_SQLITE_NOW} "
            f"WHERE id IN ({marks}) "
            f"RETURNING {_TASK_COLS.replace('t.', '')}",
            [worker_id, lease, lease, *ids],
        )
        rows = cursor.fetchall()
        run_ids = sorted({row[2] for row in rows})
        cursor.execute(
            'SELECT r.id, d.id, d.name, d.provider, r."window", r.scraper_version, '
            "COALESCE(d.lease_seconds, %s), d.max_attempts, d.max_elapsed_seconds "
            "FROM recovery_run r JOIN recovery_dataset d ON d.id = r.dataset_id "
            f"WHERE r.id IN ({', '.join(['%s'] * len(run_ids))})",
            [lease, *run_ids],
        )
        runs = {row[0]: row[1:] for row in cursor.fetchall()}
        claimed = [
            _claimed_from_row((*row, *previous[row[0]], *runs[row[2]]), lease) for row in rows
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


def _record_takeovers(cursor, worker_id: str, claimed: list[Claimed]) -> None:
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
        plan = _Plan(old, Outcome(), TaskState.LEASED, "lost_lease", "", "", None, None)
        detail = f"lease expired without a commit; taken over by {worker_id}"
        rows.append((plan, "lost_lease", detail, c.previous_owner))
    _insert_attempts(cursor, rows, now)


def claim(worker_id: str, limit: int | None = None) -> list[Claimed]:
    """Lease up to `limit` due tasks (priority, then due time) to `worker_id`.

    Sets owner, lease_until (= next_attempt_at), lease_token + 1, attempt_count + 1 and
    first_attempt_at when unset. Lease length: the dataset's lease_seconds or
    SALVAGE_LEASE_SECONDS.
    """
    limit = limit or settings.SALVAGE_CLAIM_BATCH
    lease = int(settings.SALVAGE_LEASE_SECONDS)
    if _pg():
        return _claim_pg_one_statement(worker_id, limit, lease)
    return _retry_locked(_claim_sqlite, worker_id, limit, lease)


# --- heartbeat ---------------------------------------------------------------------------------


def heartbeat(worker_id: str, claimed: Sequence[Claimed]) -> set[int]:
    """Extend the leases this worker still holds; returns the task ids still held.

    A task missing from the answer was re-claimed by someone else (its token moved) or
    finished: the caller must stop working on it. An expired lease nobody took yet is still
    ours (the token did not move), so extending it is correct.
    """
    if not claimed:
        return set()
    if _pg():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE recovery_task AS t SET "
                "lease_until = statement_timestamp() + make_interval(secs => h.secs), "
                "next_attempt_at = statement_timestamp() + make_interval(secs => h.secs) "
                "FROM unnest(%s::bigint[], %s::bigint[], %s::integer[]) AS h(id, token, secs) "
                "WHERE t.id = h.id AND t.lease_token = h.token AND t.lease_owner = %s "
                f"AND t.state = {_LEASED} RETURNING t.id",
                [
                    [c.task_id for c in claimed],
                    [c.lease_token for c in claimed],
                    [c.lease_seconds for c in claimed],
                    worker_id,
                ],
            )
            held = {row[0] for row in cursor.fetchall()}
    else:
        held = _retry_locked(_heartbeat_sqlite, worker_id, claimed)
    _touch_worker(worker_id)
    return held


def _heartbeat_sqlite(worker_id: str, claimed: Sequence[Claimed]) -> set[int]:
    held: set[int] = set()
    with transaction.atomic(), connection.cursor() as cursor:
        for c in claimed:
            until = _plus_seconds_sql("%s")
            cursor.execute(
                f"UPDATE recovery_task SET lease_until = {until}, next_attempt_at = {until} "
                f"WHERE id = %s AND lease_token = %s AND lease_owner = %s AND state = {_LEASED} "
                "RETURNING id",
                [c.lease_seconds, c.lease_seconds, c.task_id, c.lease_token, worker_id],
            )
            held.update(row[0] for row in cursor.fetchall())
    return held


# --- worker heartbeat rows ---------------------------------------------------------------------


def _upsert_worker_sql() -> str:
    now = _now_sql()
    return (
        "INSERT INTO recovery_workerheartbeat "
        "(worker, hostname, pid, started_at, last_seen, claimed, committed) "
        f"VALUES (%s, %s, %s, {now}, {now}, %s, %s) "
        "ON CONFLICT (worker) DO UPDATE SET last_seen = excluded.last_seen, "
        "pid = excluded.pid, "
        "claimed = recovery_workerheartbeat.claimed + excluded.claimed, "
        "committed = recovery_workerheartbeat.committed + excluded.committed"
    )


def _touch_worker(worker_id: str, claimed: int = 0, committed: int = 0) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            _upsert_worker_sql(),
            [worker_id, socket.gethostname()[:200], os.getpid(), claimed, committed],
        )


def touch_worker(worker_id: str, claimed: int = 0, committed: int = 0) -> None:
    """Record that a worker is alive (and what it did) in WorkerHeartbeat."""
    if _pg():
        _touch_worker(worker_id, claimed, committed)
    else:
        _retry_locked(_touch_worker, worker_id, claimed, committed)


# --- fenced commit -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Plan:
    claimed: Claimed
    outcome: Outcome
    state: str  # target task state
    attempt_outcome: str
    error_class: str
    error_detail: str
    delay: float | None  # seconds until next_attempt_at (retry_wait only)
    artefact: dict[str, Any] | None
    attempt_id: uuid.UUID = field(default_factory=uuid.uuid4)
    payload_hash: str = ""


@dataclass(slots=True)
class CommitSummary:
    """What a commit_outcomes call did (counts by target state, plus the losers)."""

    states: dict[str, int] = field(default_factory=dict)
    lost: list[int] = field(default_factory=list)  # task ids whose lease had moved on
    observations: int = 0  # rows inserted or changed (an unchanged upsert is not counted)
    discovered: int = 0  # new child tasks (already-known keys are not counted)

    @property
    def committed(self) -> int:
        return sum(self.states.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "states": dict(self.states),
            "lost": len(self.lost),
            "observations": self.observations,
            "discovered": self.discovered,
        }


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds the tasks a commit moves, besides each task's own lease_token.

    A worker's lease (state leased, lease_owner = the worker) by default; a provider job's
    import (state remote, remote_job = the job); or a re-synchronisation of a completed job
    (Continue): the tasks are already committed and only their data may change, fenced by
    the token their job held (a task claimed or reset since then has another).
    """

    source: str = TaskState.LEASED
    remote_job: int | None = None

    @classmethod
    def job(cls, job_pk: int) -> Holder:
        return cls(TaskState.REMOTE, job_pk)

    @classmethod
    def resync(cls, job_pk: int) -> Holder:
        return cls(TaskState.COMMITTED, job_pk)

    def sql(self, table: str, worker_id: str) -> tuple[str, list[Any]]:
        """The holder's part of the fence's WHERE clause, and its parameters."""
        if self.source == TaskState.LEASED:
            return f"{table}.state = %s AND {table}.lease_owner = %s", [self.source, worker_id]
        if self.source == TaskState.REMOTE:
            return f"{table}.state = %s AND {table}.remote_job_id = %s", [
                self.source,
                self.remote_job,
            ]
        return f"{table}.state = %s", [self.source]


WORKER = Holder()


def plan_outcome(
    claimed: Claimed,
    outcome: Outcome,
    *,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> _Plan:
    """Decide a task's next state from its outcome (the retry table + budgets). Pure."""
    now = now or datetime.now(UTC)
    if outcome.ok:
        # A success may carry notes for triage (the browser provider's refused subresources).
        notes = failures.sanitise_artefact(outcome.artefact) if outcome.artefact else None
        return _Plan(claimed, outcome, TaskState.COMMITTED, "committed", "", "", None, notes)
    error_class = str(outcome.error_class)
    rule = failures.rule_for(outcome.error_class)
    detail = outcome.error_detail[:2000]
    artefact = failures.sanitise_artefact(outcome.artefact, outcome.http_status)
    if rule.action in failures.RETRYING:
        if outcome.retry_after is not None and outcome.retry_after >= 0:
            delay = min(float(outcome.retry_after), float(settings.SALVAGE_RETRY_AFTER_CAP))
        else:
            delay = failures.backoff(
                claimed.attempt_count,
                settings.SALVAGE_BACKOFF_BASE,
                settings.SALVAGE_BACKOFF_CAP,
                rng,
            )
        first = claimed.first_attempt_at or now
        elapsed_at_retry = (now - first).total_seconds() + delay
        if claimed.attempt_count >= claimed.max_attempts:
            reason = f"budget exhausted: {claimed.attempt_count} of {claimed.max_attempts} attempts"
        elif elapsed_at_retry > claimed.max_elapsed_seconds:
            reason = (
                f"budget exhausted: next try at {elapsed_at_retry:.0f}s after the first attempt "
                f"exceeds {claimed.max_elapsed_seconds}s"
            )
        else:
            return _Plan(
                claimed,
                outcome,
                TaskState.RETRY_WAIT,
                "retry",
                error_class,
                detail,
                delay,
                artefact,
            )
        # The task keeps its real error class (a rerun selects "server_error", not "budget");
        # the dead state and the detail say the budget ran out.
        detail = f"{reason}; last error: {detail}" if detail else reason
        return _Plan(claimed, outcome, TaskState.DEAD, "dead", error_class, detail, None, artefact)
    target = {
        Action.QUARANTINE: (TaskState.QUARANTINED, "quarantined"),
        Action.GONE: (TaskState.GONE, "gone"),
        Action.DEAD: (TaskState.DEAD, "dead"),
    }[rule.action]
    if rule.action == Action.QUARANTINE and artefact is None:
        artefact = {"status": outcome.http_status}
    return _Plan(claimed, outcome, target[0], target[1], error_class, detail, None, artefact)


def _values_sql(n_rows: int, casts: Sequence[str]) -> str:
    """'(%s, %s::bigint, ...), (...)' — casts only on PostgreSQL, where VALUES needs types."""
    if _pg():
        one = "(" + ", ".join(f"%s{c}" if c else "%s" for c in casts) + ")"
    else:
        one = "(" + ", ".join(["%s"] * len(casts)) + ")"
    return ", ".join([one] * n_rows)


def _fence(cursor, worker_id: str, plans: list[_Plan], holder: Holder = WORKER) -> set[int]:
    """The fenced UPDATE for every task of the batch, first, so a stale worker writes nothing.

    Each row matches only while its holder still holds it (state = leased and owner = us, or
    state = remote and the job is ours) and lease_token = our token.
    """
    casts = ("::bigint", "::bigint", "::varchar", "::double precision", "::varchar", "::integer")
    params: list[Any] = []
    for p in plans:
        delay = p.delay
        if delay is not None and not _pg():
            delay = f"{delay:.6f}"  # SQLite date modifiers want plain decimal text
        params += [
            p.claimed.task_id,
            p.claimed.lease_token,
            p.state,
            delay,
            p.error_class,
            p.outcome.http_status,
        ]
    now = _now_sql()
    later = _plus_seconds_sql("v.delay")
    values = _values_sql(len(plans), casts)
    held, held_params = holder.sql("t" if _pg() else "recovery_task", worker_id)
    if _pg():
        sql = (
            f"UPDATE recovery_task AS t SET state = v.state, lease_owner = '', "
            f"lease_until = NULL, remote_job_id = NULL, "
            f"next_attempt_at = CASE WHEN v.delay IS NULL THEN t.next_attempt_at "
            f"ELSE {later} END, "
            f"last_error_class = v.error_class, last_http_status = v.http_status, "
            f"state_changed_at = {now} "
            f"FROM (VALUES {values}) AS v(id, token, state, delay, error_class, http_status) "
            f"WHERE t.id = v.id AND t.lease_token = v.token AND {held} RETURNING t.id"
        )
    else:
        sql = (
            f"WITH v(id, token, state, delay, error_class, http_status) AS (VALUES {values}) "
            f"UPDATE recovery_task SET state = v.state, lease_owner = '', lease_until = NULL, "
            f"remote_job_id = NULL, "
            f"next_attempt_at = CASE WHEN v.delay IS NULL THEN recovery_task.next_attempt_at "
            f"ELSE {later} END, "
            f"last_error_class = v.error_class, last_http_status = v.http_status, "
            f"state_changed_at = {now} "
            f"FROM v WHERE recovery_task.id = v.id AND recovery_task.lease_token = v.token "
            f"AND {held} RETURNING recovery_task.id"
        )
    cursor.execute(sql, [*params, *held_params])
    return {row[0] for row in cursor.fetchall()}


def _insert_attempts(cursor, rows: list[tuple[_Plan, str, str, str]], finished) -> None:
    """Attempt rows: (plan, outcome, error_detail, worker) — one multi-row INSERT per chunk."""
    pg = _pg()
    json_mark = "::jsonb" if pg else ""
    casts = ("",) * 10 + (json_mark,) + ("",) * 4
    finished_param = _dt_param(finished)
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        params: list[Any] = []
        for plan, outcome, detail, worker_id in chunk:
            c = plan.claimed
            params += [
                plan.attempt_id if pg else plan.attempt_id.hex,
                c.task_id,
                c.run_id,
                c.recovery_batch_id,
                c.lease_token,
                worker_id,
                c.scraper_version,
                _dt_param(c.started_at),
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
            f"error_class, error_detail, payload_hash) VALUES {_values_sql(len(chunk), casts)}",
            params,
        )


def _observation_rows(plans: list[_Plan]) -> list[ObservationRow]:
    """(observation_key, entity_key, payload_json, hash, plan) deduplicated by key.

    Two tasks of one batch may report the same entity; one statement may not upsert a row
    twice (PostgreSQL refuses), so the later one wins, as it would in two transactions.
    Sorted by key so concurrent committers lock rows in the same order (no deadlock).
    """
    rows: dict[str, tuple] = {}
    for plan in plans:
        for okey, entity_key, payload_json, digest in _plan_observations(plan):
            rows[okey] = ObservationRow(okey, entity_key, payload_json, digest, plan)
    return [rows[k] for k in sorted(rows)]


def _plan_observations(plan: _Plan) -> list[tuple[str, str, str, str]]:
    """(observation_key, entity_key, payload_json, hash) of one outcome, in order; also sets
    the plan's payload_hash (its one observation's, or a hash over several)."""
    c = plan.claimed
    out = []
    for obs in plan.outcome.observations:
        payload_json = canonical_json(obs.payload)
        digest = keys.payload_hash(payload_json)
        okey = keys.observation_key(c.dataset, obs.entity_key, c.window)
        out.append((okey, obs.entity_key, payload_json, digest))
    if len(out) == 1:
        plan.payload_hash = out[0][3]
    elif out:
        plan.payload_hash = keys.payload_hash("\n".join(row[3] for row in out))
    return out


def _upsert_observations(cursor, rows: list[ObservationRow], now_param) -> int:
    pg = _pg()
    json_mark = "::jsonb" if pg else ""
    casts = ("",) * 5 + (json_mark,) + ("",) * 8
    changed = 0
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
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
                row.plan.attempt_id if pg else row.plan.attempt_id.hex,
                c.scraper_version,
                "pending",
                1,
                now_param,
                now_param,
            ]
        # Upsert by observation_key; only a changed payload rewrites the row (and sends it
        # back to validation), so a repeated execution is a no-op for the data.
        cursor.execute(
            'INSERT INTO recovery_observation (run_id, observation_key, entity_key, "window", '
            "partition, payload, payload_hash, source_task_id, source_attempt_id, "
            "scraper_version, validation_state, version, observed_at, updated_at) "
            f"VALUES {_values_sql(len(chunk), casts)} "
            "ON CONFLICT (observation_key) DO UPDATE SET payload = excluded.payload, "
            "payload_hash = excluded.payload_hash, partition = excluded.partition, "
            "source_task_id = excluded.source_task_id, "
            "source_attempt_id = excluded.source_attempt_id, "
            "scraper_version = excluded.scraper_version, validation_state = 'pending', "
            "updated_at = excluded.updated_at "
            "WHERE recovery_observation.payload_hash <> excluded.payload_hash RETURNING 1",
            params,
        )
        changed += len(cursor.fetchall())
    return changed


def _insert_children(cursor, plans: list[_Plan], now_param) -> tuple[int, list]:
    """Discovered URLs become tasks in the parent's transaction (the task table is the seen
    set: ON CONFLICT (task_key) DO NOTHING). Returns (new tasks, counter changes)."""
    rows: dict[str, list[Any]] = {}
    for plan in plans:
        c = plan.claimed
        for child in plan.outcome.discovered:
            try:
                url = keys.canonical_url(child.url)
                tkey = keys.task_key(c.dataset, url, c.window, child.page_type)
            except keys.InvalidURL as exc:
                log.warning("task %s discovered an unusable URL: %s", c.task_id, exc)
                continue
            rows.setdefault(
                tkey,
                [
                    c.run_id,
                    tkey,
                    url,
                    child.page_type,
                    child.partition or c.partition,
                    child.priority,
                    child.discovery,
                    c.task_id,
                    min(c.depth + 1, 32767),
                    canonical_json(child.navigation or {}),
                    "pending",
                    0,
                    now_param,
                    "",
                    None,
                    0,
                    None,
                    "",
                    None,
                    c.recovery_batch_id,
                    now_param,
                    now_param,
                ],
            )
    if not rows:
        return 0, []
    json_mark = "::jsonb" if _pg() else ""
    casts = ("",) * 9 + (json_mark,) + ("",) * 12
    ordered = [rows[k] for k in sorted(rows)]  # same lock order in every committer
    inserted: list[tuple[int, str]] = []
    for start in range(0, len(ordered), _CHUNK):
        chunk = ordered[start : start + _CHUNK]
        cursor.execute(
            "INSERT INTO recovery_task (run_id, task_key, url, page_type, partition, priority, "
            "discovery, parent_id, depth, navigation, state, attempt_count, next_attempt_at, "
            "lease_owner, lease_until, lease_token, first_attempt_at, last_error_class, "
            "last_http_status, recovery_batch_id, created_at, state_changed_at) "
            f"VALUES {_values_sql(len(chunk), casts)} "
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
    changes = [(run_id, part, None, TaskState.PENDING, n) for (run_id, part), n in per_part.items()]
    return len(inserted), changes


def _commit(
    worker_id: str, plans: list[_Plan], finished: datetime, holder: Holder
) -> CommitSummary:
    summary = CommitSummary()
    now_param = _dt_param(finished)
    with transaction.atomic(), connection.cursor() as cursor:
        fenced = _fence(cursor, worker_id, plans, holder)
        won = [p for p in plans if p.claimed.task_id in fenced]
        lost = [p for p in plans if p.claimed.task_id not in fenced]
        obs_rows = _observation_rows(plans)  # also sets every plan's payload_hash
        won_ids = {id(p) for p in won}
        attempt_rows = [(p, p.attempt_outcome, p.error_detail, worker_id) for p in won]
        # A lost lease still leaves a traceable Attempt (guarantee 3), but none of its writes:
        # no observation, no child, no state change.
        for p in lost:
            detail = (
                f"lost lease: token {p.claimed.lease_token} is no longer current; "
                f"outcome {p.attempt_outcome} discarded"
            )
            if p.error_detail:
                detail += f" ({p.error_detail})"
            attempt_rows.append((p, "lost_lease", detail, worker_id))
        if attempt_rows:
            _insert_attempts(cursor, attempt_rows, finished)
        obs_rows = [r for r in obs_rows if id(r.plan) in won_ids]
        # A changed value of a published run becomes a versioned correction (not an overwrite).
        obs_rows = corrections.divert_published(obs_rows)
        if obs_rows:
            summary.observations = _upsert_observations(cursor, obs_rows, now_param)
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
            _upsert_worker_sql(),
            [worker_id, socket.gethostname()[:200], os.getpid(), len(plans), len(won)],
        )
        summary.lost = [p.claimed.task_id for p in lost]
        faults.point("in_commit")
    return summary


def commit_outcomes(
    worker_id: str,
    claimed: Sequence[Claimed],
    outcomes: Sequence[Outcome],
    *,
    rng: random.Random | None = None,
    holder: Holder = WORKER,
) -> CommitSummary:
    """Commit a batch of outcomes, each task fenced by its holder + its own lease token.

    Every observation write goes through here, a provider job's import included (`holder`:
    Holder.job, or Holder.resync for a Continue of a completed job), so a changed value of a
    published run always becomes a versioned correction (recovery.corrections).

    One transaction: the fenced state UPDATE first (so nothing of a stale worker is written),
    then the Attempt rows, the observation upserts, the discovered children and the counter
    deltas, only for the tasks whose fence matched. A task whose lease moved on gets an
    Attempt with outcome lost_lease and nothing else. Returns a CommitSummary.
    """
    if len(claimed) != len(outcomes):
        raise ValueError(f"{len(claimed)} claimed tasks but {len(outcomes)} outcomes")
    if not claimed:
        return CommitSummary()
    finished = datetime.now(UTC)
    plans = [
        plan_outcome(c, o, now=finished, rng=rng) for c, o in zip(claimed, outcomes, strict=True)
    ]
    if holder.source == TaskState.COMMITTED and any(p.state != TaskState.COMMITTED for p in plans):
        raise ValueError("a re-synchronisation commits only successful outcomes")
    if _pg():
        return _commit_pg_one_statement(worker_id, plans, finished, holder)
    return _retry_locked(_commit, worker_id, plans, finished, holder)


# --- PostgreSQL fast path: one statement per claim, one per commit -----------------------------
# Round trips, not SQL work, dominate a batch on PostgreSQL (research/perf-baselines.md: the
# single-statement commit was x1.67). So on PostgreSQL the claim (with its counter deltas and
# takeover attempts) is one autocommit statement, and the commit is one statement inside
# BEGIN/COMMIT: the fence first as a data-modifying CTE, and every other write joined to the
# fence's RETURNING, so a task whose fence did not match writes nothing but its lost_lease
# attempt. Counter deltas are the same rows counters.record() would append. The statements run
# on a server-side-binding psycopg cursor over Django's own connection (same transaction):
# Django's default client-side binding re-parses these long statements on every call.


def _pg_cursor():
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


# Parameters: worker, lease, lease, limit, lease (tests/db/test_claim_plan.py EXPLAINs it).
_PG_CLAIM = f"""
WITH u AS (
    UPDATE recovery_task AS t SET
        state = {_LEASED},
        lease_owner = %s,
        lease_until = statement_timestamp() + make_interval(secs => COALESCE(d.lease_seconds, %s)),
        next_attempt_at =
            statement_timestamp() + make_interval(secs => COALESCE(d.lease_seconds, %s)),
        lease_token = t.lease_token + 1,
        attempt_count = t.attempt_count + 1,
        first_attempt_at = COALESCE(t.first_attempt_at, statement_timestamp()),
        state_changed_at = statement_timestamp()
    FROM (
        -- task_claim_idx: partial index on the claimable states, ordered like this ORDER BY.
        -- SKIP LOCKED: concurrent claimers take disjoint rows instead of queueing on each other.
        SELECT id, state, lease_owner FROM recovery_task
        WHERE state IN {CLAIMABLE_SQL} AND next_attempt_at <= statement_timestamp()
        ORDER BY priority DESC, next_attempt_at
        LIMIT %s
        FOR UPDATE SKIP LOCKED
    ) AS c, recovery_run AS r, recovery_dataset AS d
    WHERE t.id = c.id AND r.id = t.run_id AND d.id = r.dataset_id
    RETURNING {_TASK_COLS}, t.lease_owner, c.state AS previous_state,
        c.lease_owner AS previous_owner, d.id AS dataset_id, d.name, d.provider, r."window",
        r.scraper_version, COALESCE(d.lease_seconds, %s) AS lease_seconds, d.max_attempts,
        d.max_elapsed_seconds
), moved AS (
    -- counters: pending/retry_wait -> leased (an expired lease re-claimed changes no count)
    INSERT INTO recovery_taskcountdelta (run_id, partition, state, delta)
    SELECT run_id, partition, state, n::integer FROM (
        SELECT run_id, partition, previous_state AS state, -count(*) AS n FROM u
        WHERE previous_state <> {_LEASED} GROUP BY run_id, partition, previous_state
        UNION ALL
        SELECT run_id, partition, {_LEASED}, count(*) FROM u
        WHERE previous_state <> {_LEASED} GROUP BY run_id, partition
    ) AS s
    RETURNING 1
), taken AS (
    -- a lease that expired without a commit: its holder's attempt stays traceable
    INSERT INTO recovery_attempt (id, task_id, run_id, recovery_batch_id, lease_token, worker,
        scraper_version, started_at, finished_at, outcome, error_class, error_detail,
        payload_hash)
    SELECT gen_random_uuid(), id, run_id, recovery_batch_id, lease_token - 1, previous_owner,
        scraper_version, statement_timestamp(), statement_timestamp(), 'lost_lease', '',
        'lease expired without a commit; taken over by ' || lease_owner, ''
    FROM u WHERE previous_state = {_LEASED} AND previous_owner <> ''
    RETURNING 1
)
SELECT id, task_key, run_id, url, page_type, partition, depth, navigation, attempt_count,
    lease_token, first_attempt_at, recovery_batch_id, previous_state, previous_owner,
    dataset_id, name, provider, "window", scraper_version, lease_seconds, max_attempts,
    max_elapsed_seconds
FROM u
"""


def _claim_pg_one_statement(worker_id: str, limit: int, lease: int) -> list[Claimed]:
    with _pg_cursor() as cursor:
        cursor.execute(_PG_CLAIM, [worker_id, lease, lease, limit, lease], prepare=True)
        return [_claimed_from_row(row, lease) for row in cursor.fetchall()]


def _unnest(prefix: str, rows: list[list[Any]], types: Sequence[str]) -> tuple[str, dict]:
    """`unnest(%(prefix0)s::t0[], ...)` and its parameters: one array per column.

    Arrays, not a VALUES list with a placeholder per value: the statement text stays the same
    for every batch, so psycopg parses it once and PostgreSQL plans it once (prepared).
    """
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(types)
    params = {f"{prefix}{i}": list(col) for i, col in enumerate(columns)}
    # %b: binary arrays (text arrays escape every element with a regex: ~10x the client CPU).
    sql = ", ".join(f"%({prefix}{i})b::{t}[]" for i, t in enumerate(types))
    return f"SELECT * FROM unnest({sql})", params


_V_TYPES = ("bigint", "bigint", "varchar", "float8", "varchar", "integer")
_A_TYPES = (
    "uuid",  # id
    "bigint",  # task_id
    "bigint",  # run_id
    "bigint",  # recovery_batch_id
    "bigint",  # lease_token
    "varchar",  # scraper_version
    "timestamptz",  # started_at
    "integer",  # http_status
    "jsonb",  # artefact
    "varchar",  # outcome when the fence matched
    "varchar",  # error_class
    "text",  # error_detail when the fence matched
    "text",  # error_detail when it did not (lost_lease)
    "varchar",  # payload_hash
)
_O_TYPES = (
    "integer",  # seq: the later row of one key wins, as in two transactions
    "varchar",  # observation_key
    "bigint",  # run_id
    "varchar",  # entity_key
    "varchar",  # window
    "varchar",  # partition
    "jsonb",  # payload
    "varchar",  # payload_hash
    "bigint",  # source_task_id
    "uuid",  # source_attempt_id
    "varchar",  # scraper_version
)
_C_TYPES = (
    "integer",  # seq
    "bigint",  # run_id
    "varchar",  # task_key
    "text",  # url
    "varchar",  # page_type
    "varchar",  # partition
    "smallint",  # priority
    "varchar",  # discovery
    "bigint",  # parent_id
    "smallint",  # depth
    "jsonb",  # navigation
    "bigint",  # recovery_batch_id
)

_PG_COMMIT = """
WITH v(id, token, state, delay, error_class, http_status) AS ({v}),
fenced AS (
    -- The fence: only while the task is still ours (leased to us, or held by our job)
    -- under our token.
    UPDATE recovery_task AS t SET state = v.state, lease_owner = '', lease_until = NULL,
        remote_job_id = NULL, next_attempt_at = CASE WHEN v.delay IS NULL THEN t.next_attempt_at
            ELSE statement_timestamp() + make_interval(secs => v.delay) END,
        last_error_class = v.error_class, last_http_status = v.http_status,
        state_changed_at = statement_timestamp()
    FROM v
    WHERE t.id = v.id AND t.lease_token = v.token AND {held}
    RETURNING t.id, t.run_id, t.partition, t.state
),
a(id, task_id, run_id, batch_id, token, scraper_version, started_at, http_status, artefact,
    outcome, error_class, detail, lost_detail, payload_hash) AS ({a}),
attempts AS (
    INSERT INTO recovery_attempt (id, task_id, run_id, recovery_batch_id, lease_token, worker,
        scraper_version, started_at, finished_at, http_status, artefact, outcome, error_class,
        error_detail, payload_hash)
    SELECT a.id, a.task_id, a.run_id, a.batch_id, a.token, %(worker)s, a.scraper_version,
        a.started_at, %(finished)s, a.http_status, a.artefact,
        CASE WHEN f.id IS NULL THEN 'lost_lease' ELSE a.outcome END, a.error_class,
        CASE WHEN f.id IS NULL THEN a.lost_detail ELSE a.detail END, a.payload_hash
    FROM a LEFT JOIN fenced AS f ON f.id = a.task_id
    RETURNING 1
),
o(seq, okey, run_id, entity_key, "window", partition, payload, payload_hash, task_id,
    attempt_id, scraper_version) AS ({o}),
won_obs AS (
    SELECT DISTINCT ON (o.okey) o.*, r.acceptance_state FROM o
    JOIN fenced AS f ON f.id = o.task_id JOIN recovery_run AS r ON r.id = o.run_id
    ORDER BY o.okey, o.seq DESC
),
observations AS (
    -- Upsert by observation_key; an unchanged payload is a no-op (repeat execution).
    -- Sorted by key: concurrent committers lock rows in the same order.
    INSERT INTO recovery_observation (run_id, observation_key, entity_key, "window",
        partition, payload, payload_hash, source_task_id, source_attempt_id, scraper_version,
        validation_state, version, observed_at, updated_at)
    SELECT run_id, okey, entity_key, "window", partition, payload, payload_hash, task_id,
        attempt_id, scraper_version, 'pending', 1, %(finished)s, %(finished)s
    FROM won_obs WHERE acceptance_state <> ALL(%(versioned)s::varchar[])
    ORDER BY okey
    ON CONFLICT (observation_key) DO UPDATE SET payload = excluded.payload,
        payload_hash = excluded.payload_hash, partition = excluded.partition,
        source_task_id = excluded.source_task_id,
        source_attempt_id = excluded.source_attempt_id,
        scraper_version = excluded.scraper_version, validation_state = 'pending',
        updated_at = excluded.updated_at
    WHERE recovery_observation.payload_hash <> excluded.payload_hash
    RETURNING 1
),
ch(seq, run_id, task_key, url, page_type, partition, priority, discovery, parent_id, depth,
    navigation, batch_id) AS ({c}),
kids AS (
    -- Discovered URLs: the task table is the seen set; only new keys insert.
    INSERT INTO recovery_task (run_id, task_key, url, page_type, partition, priority,
        discovery, parent_id, depth, navigation, state, attempt_count, next_attempt_at,
        lease_owner, lease_token, last_error_class, recovery_batch_id, created_at,
        state_changed_at)
    SELECT DISTINCT ON (ch.task_key) ch.run_id, ch.task_key, ch.url, ch.page_type,
        ch.partition, ch.priority, ch.discovery, ch.parent_id, ch.depth, ch.navigation,
        {pending}, 0, %(finished)s, '', 0, '', ch.batch_id, %(finished)s, %(finished)s
    FROM ch JOIN fenced AS f ON f.id = ch.parent_id
    ORDER BY ch.task_key, ch.seq
    ON CONFLICT (task_key) DO NOTHING
    RETURNING run_id, partition
),
totals AS (
    UPDATE recovery_run AS r SET task_total = r.task_total + k.n
    FROM (SELECT run_id, count(*) AS n FROM kids GROUP BY run_id) AS k
    WHERE r.id = k.run_id
    RETURNING 1
),
moved AS (
    INSERT INTO recovery_taskcountdelta (run_id, partition, state, delta)
    SELECT run_id, partition, state, n::integer FROM (
        -- (a re-synchronisation's committed -> committed changes no count)
        SELECT run_id, partition, %(source)s::varchar AS state, -count(*) AS n FROM fenced
        WHERE state <> %(source)s GROUP BY run_id, partition
        UNION ALL
        SELECT run_id, partition, state, count(*) FROM fenced WHERE state <> %(source)s
        GROUP BY run_id, partition, state
        UNION ALL
        SELECT run_id, partition, {pending}, count(*) FROM kids GROUP BY run_id, partition
    ) AS s
    RETURNING 1
),
beat AS (
    INSERT INTO recovery_workerheartbeat (worker, hostname, pid, started_at, last_seen,
        claimed, committed)
    VALUES (%(worker)s, %(host)s, %(pid)s, statement_timestamp(), statement_timestamp(),
        %(claimed)s, (SELECT count(*) FROM fenced))
    ON CONFLICT (worker) DO UPDATE SET last_seen = excluded.last_seen, pid = excluded.pid,
        claimed = recovery_workerheartbeat.claimed + excluded.claimed,
        committed = recovery_workerheartbeat.committed + excluded.committed
    RETURNING 1
)
SELECT ARRAY(SELECT id FROM fenced),
    (SELECT count(*) FROM observations),
    (SELECT count(*) FROM kids),
    ARRAY(SELECT seq FROM won_obs WHERE acceptance_state = ANY(%(versioned)s::varchar[]))
"""


def _lost_detail(p: _Plan) -> str:
    detail = (
        f"lost lease: token {p.claimed.lease_token} is no longer current; "
        f"outcome {p.attempt_outcome} discarded"
    )
    return f"{detail} ({p.error_detail})" if p.error_detail else detail


# The holder's part of the fence, with named parameters (Holder.sql's, for the one statement).
_PG_HELD = {
    TaskState.LEASED: "t.state = %(source)s AND t.lease_owner = %(worker)s",
    TaskState.REMOTE: "t.state = %(source)s AND t.remote_job_id = %(job)s",
    TaskState.COMMITTED: "t.state = %(source)s",
}


def _commit_pg_one_statement(
    worker_id: str, plans: list[_Plan], finished: datetime, holder: Holder
) -> CommitSummary:
    v_rows, a_rows, o_rows, c_rows = [], [], [], []
    obs_by_seq: dict[int, ObservationRow] = {}
    for p in plans:
        c = p.claimed
        for okey, entity_key, payload_json, digest in _plan_observations(p):
            seq = len(o_rows)
            obs_by_seq[seq] = ObservationRow(okey, entity_key, payload_json, digest, p)
            o_rows.append(
                [seq, okey, c.run_id, entity_key[:500], c.window, c.partition, payload_json,
                 digest, c.task_id, p.attempt_id, c.scraper_version]
            )  # fmt: skip
        for child in p.outcome.discovered:
            try:
                url = keys.canonical_url(child.url)
                tkey = keys.task_key(c.dataset, url, c.window, child.page_type)
            except keys.InvalidURL as exc:
                log.warning("task %s discovered an unusable URL: %s", c.task_id, exc)
                continue
            c_rows.append(
                [len(c_rows), c.run_id, tkey, url, child.page_type, child.partition or c.partition,
                 child.priority, child.discovery, c.task_id, min(c.depth + 1, 32767),
                 canonical_json(child.navigation or {}), c.recovery_batch_id]
            )  # fmt: skip
        v_rows.append([c.task_id, c.lease_token, p.state, p.delay, p.error_class,
                       p.outcome.http_status])  # fmt: skip
        a_rows.append(
            [p.attempt_id, c.task_id, c.run_id, c.recovery_batch_id, c.lease_token,
             c.scraper_version, c.started_at, p.outcome.http_status,
             json.dumps(p.artefact) if p.artefact is not None else None, p.attempt_outcome,
             p.error_class, p.error_detail, _lost_detail(p), p.payload_hash]
        )  # fmt: skip
    v_sql, v_params = _unnest("v", v_rows, _V_TYPES)
    a_sql, a_params = _unnest("a", a_rows, _A_TYPES)
    o_sql, o_params = _unnest("o", o_rows, _O_TYPES)
    c_sql, c_params = _unnest("c", c_rows, _C_TYPES)
    sql = _PG_COMMIT.format(
        v=v_sql, a=a_sql, o=o_sql, c=c_sql, held=_PG_HELD[holder.source], pending=_PENDING
    )
    params = {
        "source": str(holder.source),
        "job": holder.remote_job,
        **v_params,
        **a_params,
        **o_params,
        **c_params,
        "worker": worker_id,
        "finished": finished,
        "versioned": sorted(corrections.VERSIONED_STATES),
        "host": socket.gethostname()[:200],
        "pid": os.getpid(),
        "claimed": len(plans),
    }
    summary = CommitSummary()
    with transaction.atomic(), _pg_cursor() as cursor:
        cursor.execute(sql, params, prepare=True)
        fenced_ids, summary.observations, summary.discovered, held = cursor.fetchone()
        if held:
            # Rows of a published run that already exist become versioned corrections
            # (recovery.corrections), in this same transaction; new keys are upserted.
            rows = {}
            for seq in sorted(held):
                rows[obs_by_seq[seq].observation_key] = obs_by_seq[seq]
            kept = corrections.divert_published([rows[k] for k in sorted(rows)])
            if kept:
                with connection.cursor() as django_cursor:
                    summary.observations += _upsert_observations(
                        django_cursor, kept, _dt_param(finished)
                    )
        fenced = set(fenced_ids)
        for p in plans:
            if p.claimed.task_id in fenced:
                summary.states[p.state] = summary.states.get(p.state, 0) + 1
            else:
                summary.lost.append(p.claimed.task_id)
        faults.point("in_commit")
    return summary


def internal_error(detail: str) -> Outcome:
    """The outcome recorded when a provider itself failed (a bug: quarantined for a human)."""
    return Outcome(error_class=ErrorClass.INTERNAL, error_detail=detail[:2000])
