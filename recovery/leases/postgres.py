"""The hot path on PostgreSQL: one statement per claim, one per commit.

Round trips, not SQL work, dominate a batch on PostgreSQL (research/perf-baselines.md: the
single-statement commit was x1.67). So the claim (with its counter deltas and takeover
attempts) is one autocommit statement, and the commit is one statement inside BEGIN/COMMIT:
the fence first as a data-modifying CTE, and every other write joined to the fence's
RETURNING, so a task whose fence did not match writes nothing but its lost_lease attempt.
Counter deltas are the same rows counters.record() would append. The statements run on a
server-side-binding psycopg cursor over Django's own connection (same transaction): Django's
default client-side binding re-parses these long statements on every call.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction

from recovery import faults
from recovery.delivery import corrections
from recovery.delivery.corrections import ObservationRow
from recovery.leases.plan import (
    Claimed,
    CommitSummary,
    Holder,
    Plan,
    claimed_from_row,
    discovered_children,
    lost_detail,
    page_incidents,
    plan_observations,
)
from recovery.leases.statements import (
    DEFERRED_FIRST_ATTEMPT,
    LEASED_SQL,
    PENDING_SQL,
    TASK_COLS,
    dt_param,
    due_sql,
    upsert_observations,
)
from recovery.ops import incidents
from recovery.states.choices import TaskState

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow


# Django opens psycopg connections with prepare_threshold=None, which also turns
# `execute(..., prepare=True)` into a no-op: the server then parsed and planned the claim and
# the commit (long CTE statements) on every batch. A threshold nobody reaches keeps Django's own
# queries unprepared (its cursors bind client-side and never prepare anyway) while the two hot
# statements, which ask for it, are prepared once per connection.
_EXPLICIT_ONLY = 2**31 - 1


def _pg_cursor() -> psycopg.Cursor[TupleRow]:
    connection.ensure_connection()
    conn = connection.connection
    if conn.prepare_threshold is None and settings.SALVAGE_PG_PREPARE:
        conn.prepare_threshold = _EXPLICIT_ONLY
    return _Cursor(conn)


def _cursor_class() -> type[psycopg.Cursor[TupleRow]]:
    """A psycopg cursor that parses each of our statement texts once per process.

    psycopg caches a query's placeholder parse only for texts under 4 KB and 50 parameters;
    the commit statement is over both, so every batch re-ran its regex split (~0.3 ms). The
    texts here are a handful of fixed strings, so their parse is kept. This leans on
    psycopg's query class (pinned version); without it, the plain cursor is used.
    """
    import psycopg

    try:
        from psycopg._queries import PostgresQuery, QueryPart, _query2pg_nocache
    except ImportError:  # pragma: no cover - another psycopg layout: parse every time
        return psycopg.Cursor
    from psycopg.abc import Params, Query
    from psycopg.adapt import PyFormat
    from psycopg.rows import TupleRow

    # (statement text, connection encoding) -> its parse: (query, formats, order, parts).
    parsed: dict[
        tuple[str, str], tuple[bytes, list[PyFormat], list[str] | None, list[QueryPart]]
    ] = {}

    class ParsedOnce(PostgresQuery):
        def convert(self, query: Query, vars: Params | None) -> None:
            if not isinstance(query, str) or vars is None:
                return super().convert(query, vars)
            key = (query, self._tx.encoding)
            if key not in parsed:
                parsed[key] = _query2pg_nocache(query.encode(self._tx.encoding), key[1])
            self.query, self._want_formats, self._order, self._parts = parsed[key]
            self.dump(vars)

    class Cursor(psycopg.Cursor[TupleRow]):
        _query_cls = ParsedOnce

    return Cursor


_Cursor = _cursor_class()


# Parameters: limit, worker, lease, lease, lease (tests/db/test_claim_plan.py EXPLAINs it).
CLAIM_SQL = f"""
WITH due AS MATERIALIZED (
    -- task_claim_idx: partial index on the claimable states, ordered like this ORDER BY.
    -- SKIP LOCKED: concurrent claimers take disjoint rows instead of queueing on each other.
    SELECT id, state, lease_owner, priority, next_attempt_at,
        (state = {LEASED_SQL} OR crash_count > 0) AS suspect
    FROM recovery_task
    WHERE {due_sql(pg=True)}
    ORDER BY priority DESC, next_attempt_at
    LIMIT %s
    FOR UPDATE SKIP LOCKED
), c AS (
    -- A page that may have killed a worker is claimed alone (statements.is_suspect); the
    -- rows locked but not taken are free again when this statement ends.
    SELECT id, state, lease_owner FROM due WHERE NOT EXISTS (SELECT 1 FROM due WHERE suspect)
    UNION ALL
    (SELECT id, state, lease_owner FROM due WHERE suspect
     ORDER BY priority DESC, next_attempt_at LIMIT 1)
), u AS (
    UPDATE recovery_task AS t SET
        state = {LEASED_SQL},
        lease_owner = %s,
        -- lease_auto_seconds: a lease_seconds = "auto" dataset's measured lease
        -- (recovery.leases.sizing), NULL until enough attempts exist.
        lease_until = statement_timestamp()
            + make_interval(secs => COALESCE(d.lease_seconds, d.lease_auto_seconds, %s)),
        next_attempt_at = statement_timestamp()
            + make_interval(secs => COALESCE(d.lease_seconds, d.lease_auto_seconds, %s)),
        lease_token = t.lease_token + 1,
        attempt_count = t.attempt_count + 1,
        crash_count = t.crash_count + CASE WHEN c.state = {LEASED_SQL} THEN 1 ELSE 0 END,
        first_attempt_at = COALESCE(t.first_attempt_at, statement_timestamp()),
        state_changed_at = statement_timestamp()
    FROM c, recovery_run AS r, recovery_dataset AS d
    WHERE t.id = c.id AND r.id = t.run_id AND d.id = r.dataset_id
    RETURNING {TASK_COLS}, t.lease_owner, c.state AS previous_state,
        c.lease_owner AS previous_owner, d.id AS dataset_id, d.name, d.provider, r."window",
        r.scraper_version, COALESCE(d.lease_seconds, d.lease_auto_seconds, %s) AS lease_seconds,
        d.max_attempts, d.max_elapsed_seconds
), moved AS (
    -- counters: pending/retry_wait -> leased (an expired lease re-claimed changes no count)
    INSERT INTO recovery_taskcountdelta (run_id, partition, state, delta)
    SELECT run_id, partition, state, n::integer FROM (
        SELECT run_id, partition, previous_state AS state, -count(*) AS n FROM u
        WHERE previous_state <> {LEASED_SQL} GROUP BY run_id, partition, previous_state
        UNION ALL
        SELECT run_id, partition, {LEASED_SQL}, count(*) FROM u
        WHERE previous_state <> {LEASED_SQL} GROUP BY run_id, partition
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
    FROM u WHERE previous_state = {LEASED_SQL} AND previous_owner <> ''
    RETURNING 1
)
SELECT id, task_key, run_id, url, page_type, partition, depth, navigation, attempt_count,
    lease_token, first_attempt_at, recovery_batch_id, crash_count, deferred_count, previous_state,
    previous_owner,
    dataset_id, name, provider, "window", scraper_version, lease_seconds, max_attempts,
    max_elapsed_seconds
FROM u
"""


def claim(worker_id: str, limit: int, lease: int) -> list[Claimed]:
    with _pg_cursor() as cursor:
        cursor.execute(CLAIM_SQL, [limit, worker_id, lease, lease, lease], prepare=True)
        return [claimed_from_row(row, lease) for row in cursor.fetchall()]


def _unnest(
    prefix: str, rows: list[list[Any]], types: Sequence[str]
) -> tuple[str, dict[str, list[Any]]]:
    """`unnest(%(prefix0)s::t0[], ...)` and its parameters: one array per column.

    Arrays, not a VALUES list with a placeholder per value: the statement text stays the same
    for every batch, so psycopg parses it once and PostgreSQL plans it once (prepared).
    """
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(types)
    params = {f"{prefix}{i}": list(col) for i, col in enumerate(columns)}
    # %b: binary arrays (text arrays escape every element with a regex: ~10x the client CPU).
    sql = ", ".join(f"%({prefix}{i})b::{t}[]" for i, t in enumerate(types))
    return f"SELECT * FROM unnest({sql})", params


_V_TYPES = ("bigint", "bigint", "varchar", "float8", "varchar", "integer", "integer")


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
    "text",  # error_detail when it did not (plan.lost_detail)
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
    "varchar",  # source_task_key
    "uuid",  # source_attempt_id
    "varchar",  # scraper_version
    "bigint",  # verdict (recovery.verdicts), NULL: not judged at commit
    "varchar",  # verdict_rules
    "varchar",  # validation_state
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


COMMIT_SQL = """
WITH v(id, token, state, delay, error_class, http_status, deferred) AS ({v}),
fenced AS (
    -- The fence: only while the task is still ours (leased to us, or held by our job)
    -- under our token.
    UPDATE recovery_task AS t SET state = v.state, lease_owner = '', lease_until = NULL,
        remote_job_id = NULL, next_attempt_at = CASE WHEN v.delay IS NULL THEN t.next_attempt_at
            ELSE statement_timestamp() + make_interval(secs => v.delay) END,
        last_error_class = v.error_class, last_http_status = v.http_status,
        deferred_count = t.deferred_count + v.deferred, first_attempt_at = {first_attempt},
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
    task_key, attempt_id, scraper_version, verdict, verdict_rules, state) AS ({o}),
won_obs AS (
    SELECT DISTINCT ON (o.okey) o.*, r.acceptance_state FROM o
    JOIN fenced AS f ON f.id = o.task_id JOIN recovery_run AS r ON r.id = o.run_id
    ORDER BY o.okey, o.seq DESC
),
observations AS (
    -- Upsert by observation_key; an unchanged payload is a no-op (repeat execution).
    -- Sorted by key: concurrent committers lock rows in the same order.
    INSERT INTO recovery_observation (run_id, observation_key, entity_key, "window",
        partition, payload, payload_hash, source_task_id, source_task_key, source_attempt_id,
        scraper_version, verdict, verdict_rules, validation_state, version, observed_at,
        updated_at)
    SELECT run_id, okey, entity_key, "window", partition, payload, payload_hash, task_id,
        task_key, attempt_id, scraper_version, verdict, verdict_rules, state, 1,
        %(finished)s, %(finished)s
    FROM won_obs WHERE acceptance_state <> ALL(%(versioned)s::varchar[])
    ORDER BY okey
    ON CONFLICT (observation_key) DO UPDATE SET payload = excluded.payload,
        payload_hash = excluded.payload_hash, partition = excluded.partition,
        source_task_id = excluded.source_task_id,
        source_task_key = excluded.source_task_key,
        source_attempt_id = excluded.source_attempt_id,
        scraper_version = excluded.scraper_version, verdict = excluded.verdict,
        verdict_rules = excluded.verdict_rules, validation_state = excluded.validation_state,
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


# The holder's part of the fence, with named parameters (Holder.sql's, for the one statement).
HELD_SQL: dict[str, str] = {
    TaskState.LEASED: "t.state = %(source)s AND t.lease_owner = %(worker)s",
    TaskState.REMOTE: "t.state = %(source)s AND t.remote_job_id = %(job)s",
    TaskState.COMMITTED: "t.state = %(source)s",
}


def build_commit(
    worker_id: str, plans: list[Plan], finished: datetime, holder: Holder
) -> Callable[[], CommitSummary]:
    """The commit's statement and parameters, built now; the returned function runs it.

    Apart so that a pipelined worker (recovery.commit_lane) does this Python work on its own
    thread and only the transaction on the commit thread: there it would compete for the GIL
    with the event loop running the next batch."""
    v_rows: list[list[Any]] = []
    a_rows: list[list[Any]] = []
    o_rows: list[list[Any]] = []
    c_rows: list[list[Any]] = []
    obs_by_seq: dict[int, ObservationRow] = {}
    for p in plans:
        c = p.claimed
        for row in plan_observations(p):
            seq = len(o_rows)
            obs_by_seq[seq] = row
            o_rows.append(
                [seq, row.observation_key, c.run_id, row.entity_key[:500], c.window,
                 c.partition, row.payload_json, row.payload_hash, c.task_id, c.task_key,
                 p.attempt_id, c.scraper_version, row.verdict, row.rules_digest, row.state]
            )  # fmt: skip
        for child in discovered_children(p):
            c_rows.append(
                [len(c_rows), child.run_id, child.task_key, child.url, child.page_type,
                 child.partition, child.priority, child.discovery, child.parent_id, child.depth,
                 child.navigation_json, child.recovery_batch_id]
            )  # fmt: skip
        v_rows.append([c.task_id, c.lease_token, p.state, p.delay, p.error_class,
                       p.outcome.http_status, 1 if p.deferred else 0])  # fmt: skip
        a_rows.append(
            [p.attempt_id, c.task_id, c.run_id, c.recovery_batch_id, c.lease_token,
             c.scraper_version, c.started_at, p.outcome.http_status,
             json.dumps(p.artefact) if p.artefact is not None else None, p.attempt_outcome,
             p.error_class, p.error_detail, lost_detail(p), p.payload_hash]
        )  # fmt: skip
    v_sql, v_params = _unnest("v", v_rows, _V_TYPES)
    a_sql, a_params = _unnest("a", a_rows, _A_TYPES)
    o_sql, o_params = _unnest("o", o_rows, _O_TYPES)
    c_sql, c_params = _unnest("c", c_rows, _C_TYPES)
    sql = COMMIT_SQL.format(
        v=v_sql,
        a=a_sql,
        o=o_sql,
        c=c_sql,
        held=HELD_SQL[holder.source],
        pending=PENDING_SQL,
        first_attempt=DEFERRED_FIRST_ATTEMPT.format(t="t"),
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
    return lambda: _run_commit(sql, params, plans, obs_by_seq, finished)


def _run_commit(
    sql: str,
    params: dict[str, Any],
    plans: list[Plan],
    obs_by_seq: dict[int, ObservationRow],
    finished: datetime,
) -> CommitSummary:
    summary = CommitSummary()
    with transaction.atomic(), _pg_cursor() as cursor:
        cursor.execute(sql, params, prepare=True)
        row = cursor.fetchone()
        if row is None:  # its final SELECT has no FROM: exactly one row, always
            raise RuntimeError("the commit statement returned no row")
        fenced_ids, summary.observations, summary.discovered, held = row
        if held:
            # Rows of a published run that already exist become versioned corrections
            # (recovery.delivery.corrections), in this same transaction; new keys are upserted.
            rows = {}
            for seq in sorted(held):
                rows[obs_by_seq[seq].observation_key] = obs_by_seq[seq]
            kept = corrections.divert_published([rows[k] for k in sorted(rows)])
            if kept:
                with connection.cursor() as django_cursor:
                    summary.observations += upsert_observations(
                        django_cursor, kept, dt_param(finished)
                    )
        fenced = set(fenced_ids)
        incidents.record_pages(
            page_incidents([p for p in plans if p.claimed.task_id in fenced]), finished
        )
        for p in plans:
            if p.claimed.task_id in fenced:
                summary.states[p.state] = summary.states.get(p.state, 0) + 1
            else:
                summary.lost.append(p.claimed.task_id)
        faults.point("in_commit")
    return summary


def heartbeat(worker_id: str, claimed: Sequence[Claimed]) -> set[int]:
    """Extend the leases still held, one statement (unnest arrays); returns the ids held."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE recovery_task AS t SET "
            "lease_until = statement_timestamp() + make_interval(secs => h.secs), "
            "next_attempt_at = statement_timestamp() + make_interval(secs => h.secs) "
            "FROM unnest(%s::bigint[], %s::bigint[], %s::integer[]) AS h(id, token, secs) "
            "WHERE t.id = h.id AND t.lease_token = h.token AND t.lease_owner = %s "
            f"AND t.state = {LEASED_SQL} RETURNING t.id",
            [
                [c.task_id for c in claimed],
                [c.lease_token for c in claimed],
                [c.lease_seconds for c in claimed],
                worker_id,
            ],
        )
        return {row[0] for row in cursor.fetchall()}
