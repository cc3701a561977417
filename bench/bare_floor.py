"""The bare-table floor: seed 002's claim and commit statements on two-index tables.

Shared by bench/claim.py (claim -> commit with a noop payload) and bench/scrape_floor.py
(aiohttp + the product's page checks and fields). The tables are the bench's own, not the
product's schema: `floor_tasks` (primary key + the claim index), `floor_attempts` (primary key
+ task index), `floor_observations` (primary key), no foreign keys, created by the bench.

- claim: one autocommit statement, `UPDATE ... FROM (SELECT ... ORDER BY priority DESC,
  next_attempt_at LIMIT n FOR UPDATE SKIP LOCKED) RETURNING`;
- commit: one transaction of the fenced UPDATE (first, so a stale worker writes nothing), the
  attempt INSERT and the observation upsert, each an executemany (pipelined on psycopg).
"""

from __future__ import annotations

import sqlite3
import uuid

from common import fenced_keys

LEASE = 300
SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

PG_FLOOR_SCHEMA = """
DROP TABLE IF EXISTS floor_tasks, floor_attempts, floor_observations;
CREATE TABLE floor_tasks (
    task_key text PRIMARY KEY, state text NOT NULL, priority int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL, lease_owner text, lease_until timestamptz,
    lease_token bigint NOT NULL DEFAULT 0, attempt_count int NOT NULL DEFAULT 0, url text NOT NULL
);
CREATE INDEX floor_claim_idx ON floor_tasks (priority DESC, next_attempt_at)
    WHERE state IN ('pending', 'retry_wait', 'leased');
CREATE TABLE floor_attempts (
    attempt_id uuid PRIMARY KEY, task_key text NOT NULL, outcome text NOT NULL,
    http_status int, payload_hash text, worker text, lease_token bigint
);
CREATE INDEX floor_attempts_task ON floor_attempts (task_key);
CREATE TABLE floor_observations (
    observation_key text PRIMARY KEY, entity_key text NOT NULL, collection_window text NOT NULL,
    payload jsonb NOT NULL, payload_hash text NOT NULL, source_task_key text NOT NULL
);
"""

PG_FLOOR_CLAIM = f"""
UPDATE floor_tasks AS t SET state = 'leased', lease_owner = %s,
    lease_until = now() + interval '{LEASE} seconds',
    next_attempt_at = now() + interval '{LEASE} seconds',
    lease_token = t.lease_token + 1, attempt_count = t.attempt_count + 1
FROM (
    SELECT task_key FROM floor_tasks
    WHERE state IN ('pending', 'retry_wait', 'leased') AND next_attempt_at <= now()
    ORDER BY priority DESC, next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED
) AS c
WHERE t.task_key = c.task_key
RETURNING t.task_key, t.lease_token, t.url
"""
PG_FLOOR_FENCE = (
    "UPDATE floor_tasks SET state = 'committed', lease_owner = NULL, lease_until = NULL "
    "WHERE task_key = %s AND lease_owner = %s AND lease_token = %s RETURNING task_key"
)
PG_FLOOR_ATTEMPT = (
    "INSERT INTO floor_attempts (attempt_id, task_key, outcome, http_status, payload_hash, "
    "worker, lease_token) VALUES (%s, %s, 'accepted', 200, %s, %s, %s)"
)
PG_FLOOR_OBSERVATION = (
    "INSERT INTO floor_observations (observation_key, entity_key, collection_window, payload, "
    "payload_hash, source_task_key) VALUES (%s, %s, 'w', %s, %s, %s) "
    "ON CONFLICT (observation_key) DO UPDATE SET payload = EXCLUDED.payload, "
    "payload_hash = EXCLUDED.payload_hash, source_task_key = EXCLUDED.source_task_key "
    "WHERE floor_observations.payload_hash <> EXCLUDED.payload_hash"
)

SQLITE_FLOOR_SCHEMA = """
DROP TABLE IF EXISTS floor_tasks; DROP TABLE IF EXISTS floor_attempts;
DROP TABLE IF EXISTS floor_observations;
CREATE TABLE floor_tasks (
    task_key text PRIMARY KEY, state text NOT NULL, priority int NOT NULL DEFAULT 0,
    next_attempt_at text NOT NULL, lease_owner text, lease_until text,
    lease_token integer NOT NULL DEFAULT 0, attempt_count integer NOT NULL DEFAULT 0,
    url text NOT NULL
);
CREATE INDEX floor_claim_idx ON floor_tasks (priority DESC, next_attempt_at)
    WHERE state IN ('pending', 'retry_wait', 'leased');
CREATE TABLE floor_attempts (
    attempt_id text PRIMARY KEY, task_key text NOT NULL, outcome text NOT NULL,
    http_status int, payload_hash text, worker text, lease_token integer
);
CREATE INDEX floor_attempts_task ON floor_attempts (task_key);
CREATE TABLE floor_observations (
    observation_key text PRIMARY KEY, entity_key text NOT NULL, collection_window text NOT NULL,
    payload text NOT NULL, payload_hash text NOT NULL, source_task_key text NOT NULL
);
"""
SQLITE_FLOOR_CLAIM = f"""
UPDATE floor_tasks SET state = 'leased', lease_owner = ?,
    lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+{LEASE} seconds'),
    next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+{LEASE} seconds'),
    lease_token = lease_token + 1, attempt_count = attempt_count + 1
WHERE task_key IN (
    SELECT task_key FROM floor_tasks
    WHERE state IN ('pending', 'retry_wait', 'leased') AND next_attempt_at <= {SQLITE_NOW}
    ORDER BY priority DESC, next_attempt_at LIMIT ?
)
RETURNING task_key, lease_token, url
"""


class PgBare:
    """One worker's connection to the bare tables on PostgreSQL."""

    def __init__(self, url: str, worker: str):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.worker = worker

    def backend_pid(self) -> int | None:
        return self.conn.info.backend_pid

    def claim(self, batch: int) -> list[tuple[str, int, str]]:
        """(task_key, lease_token, url) of up to `batch` due tasks, leased to this worker."""
        with self.conn.cursor() as cur:
            cur.execute(PG_FLOOR_CLAIM, [self.worker, batch])
            return cur.fetchall()

    def commit(self, rows: list[tuple[str, int, str, str, str]]) -> int:
        """rows: (task_key, lease_token, payload JSON, payload hash, observation key).
        Returns how many passed the fence (their attempt and observation are written)."""
        with self.conn.transaction(), self.conn.cursor() as cur:
            # Fence first: a stale worker writes nothing (same order as the engine).
            cur.executemany(
                PG_FLOOR_FENCE, [(k, self.worker, t) for k, t, *_ in rows], returning=True
            )
            fenced = fenced_keys(cur)
            won = [r for r in rows if r[0] in fenced]
            cur.executemany(
                PG_FLOOR_ATTEMPT, [(uuid.uuid4(), k, h, self.worker, t) for k, t, _p, h, _o in won]
            )
            cur.executemany(PG_FLOOR_OBSERVATION, [(o, k, p, h, k) for k, _t, p, h, o in won])
        return len(won)

    def close(self) -> None:
        self.conn.close()


class SqliteBare:
    """One worker's connection to the bare tables in a SQLite file (WAL, synchronous=FULL)."""

    def __init__(self, path: str, worker: str):
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=60)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.worker = worker

    def backend_pid(self) -> int | None:
        return None  # in-process: the client's CPU is all of it

    def claim(self, batch: int) -> list[tuple[str, int, str]]:
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        claimed = cur.execute(SQLITE_FLOOR_CLAIM, [self.worker, batch]).fetchall()
        cur.execute("COMMIT")
        return claimed

    def commit(self, rows: list[tuple[str, int, str, str, str]]) -> int:
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        won = []
        for r in rows:
            cur.execute(
                "UPDATE floor_tasks SET state = 'committed', lease_owner = NULL, "
                "lease_until = NULL WHERE task_key = ? AND lease_owner = ? AND lease_token = ? "
                "RETURNING task_key",
                (r[0], self.worker, r[1]),
            )
            if cur.fetchall():
                won.append(r)
        cur.executemany(
            PG_FLOOR_ATTEMPT.replace("%s", "?"),
            [(uuid.uuid4().hex, k, h, self.worker, t) for k, t, _p, h, _o in won],
        )
        cur.executemany(
            PG_FLOOR_OBSERVATION.replace("%s", "?"), [(o, k, p, h, k) for k, _t, p, h, o in won]
        )
        cur.execute("COMMIT")
        return len(won)

    def close(self) -> None:
        self.conn.close()
