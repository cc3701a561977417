"""Claim -> commit throughput: the engine (noop provider) against two raw-SQL floors, one run.

For each database and worker count, each kind runs in the same number of processes:
- the *bare floor* (headline): seed 002's claim and commit statements with psycopg / sqlite3
  directly, batch 50, on bare two-index tables the bench creates (bench/bare_floor.py);
- the *schema floor* (second figure): the same statements on the product's own tables, with
  their indexes and deferred foreign keys (engine / schema floor = the engine's own cost);
- the *engine*: `manage.py work`'s step with the noop provider (claim, provider call on the
  event loop, fenced commit with Attempt, observation upsert, counters, worker heartbeat);
  on PostgreSQL pipelined (recovery.worker.run_pipelined_batch: batch N commits on a second
  connection while N+1 is claimed and run; both backends' CPU counted), `--serial-engine`
  adds it one batch at a time (recovery.worker.run_batch) as a fourth kind;
- `--pipelined-floor` (PostgreSQL) adds the bare floor pipelined like the engine: the next
  batch claimed and worked while the previous one commits on a second connection and thread
  (`ratio_pipelined_floor` = engine / it, paired per round; the serial floor stays the
  headline's `ratio`).
The tasks are loaded once per worker count and every kind's processes started once; then, in
rounds, each kind alone runs a slice (`--warmup` unmeasured, then `--seconds` counted), the
order rotated by one each round (ABC, BCA, CAB: no kind always in the middle). `ratio` =
engine / bare floor, paired per round, median reported; CPU per task includes PostgreSQL's
backends: ALL backends of the bench's database, listed from pg_stat_activity by datname and read
from /proc every 50 ms (common.DatabaseCpu), so a backend opened by a reconnect (CONN_MAX_AGE)
is counted and a vanished one up to its last reading. The spread rule applies to `ratio` and
`cpu_ratio`; every round's figures are in the JSON line (`samples`).

    make bench-claim                       # PostgreSQL 1, 2 workers and SQLite 1, 2
    .venv/bin/python bench/claim.py --reps 20 --seconds 2
    .venv/bin/python bench/claim.py --pg-url postgres://postgres@127.0.0.1:5432/postgres

The last line of output is one JSON object: {"bench": "claim", "results": [...],
"loadavg_before", "loadavg_after", "headline", ...} (bench/loadwatch.py).
PostgreSQL is skipped (with a note) when it is unreachable; SQLite always runs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bare_floor import LEASE, PG_FLOOR_SCHEMA, SQLITE_FLOOR_SCHEMA, SQLITE_NOW, PgBare, SqliteBare
from common import DatabaseCpu, compile_bytecode, fenced_keys, refuse_if_spread, rotated
from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parent.parent
BATCH = 50
KINDS = ("floor", "schema_floor", "engine")
# --serial-engine adds the engine one batch at a time (the lever's before, in the same rounds).
ALL_KINDS = (*KINDS, "engine_serial", "floor_pipelined")
# --pipelined-floor adds the bare floor pipelined like the engine (PostgreSQL): batch N commits
# on a second connection and thread while N+1 is claimed and worked on the first.
FLOOR_KINDS = ("floor", "floor_pipelined")
SQLITE_LATER = f"strftime('%Y-%m-%d %H:%M:%f', 'now', '+{LEASE} seconds')"

# --- the floor: seed 002's statements on bare tables (bench/bare_floor.py) ------------------


def _work(task_key: str, url: str) -> tuple[str, str, str]:
    """What a worker does between claim and commit in the floor: the noop provider's payload,
    canonical JSON and its SHA-256 (the engine does the same inside commit_outcomes)."""
    payload = json.dumps({"n": task_key[:8], "url": url}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(payload.encode()).hexdigest()
    okey = hashlib.sha256(f"obs|{url}|w".encode()).hexdigest()
    return payload, digest, okey


class PgFloor:
    def __init__(self, url: str, worker: str):
        self.bare = PgBare(url, worker)
        self.conn, self.worker = self.bare.conn, worker

    def backend_pids(self) -> list[int]:
        return [self.bare.backend_pid()]

    def settle(self) -> None:
        pass

    def step(self, batch: int) -> int:
        claimed = self.bare.claim(batch)
        if not claimed:
            return -1
        return self.bare.commit([(key, token, *_work(key, url)) for key, token, url in claimed])


class PgPipelinedFloor:
    """The bare floor pipelined as the engine is: the claim and the work on one connection, the
    commit of the previous batch on a second one in a thread (the same statements)."""

    def __init__(self, url: str, worker: str):
        from concurrent.futures import ThreadPoolExecutor

        self.bare = PgBare(url, worker)
        self.committer = PgBare(url, worker)
        self.lane = ThreadPoolExecutor(max_workers=1)
        self.pending = None

    def settle(self) -> int:
        done, self.pending = (self.pending.result() if self.pending else 0), None
        return done

    def step(self, batch: int) -> int:
        claimed = self.bare.claim(batch)
        if not claimed:
            self.settle()
            return -1
        rows = [(key, token, *_work(key, url)) for key, token, url in claimed]
        done = self.settle()  # the previous batch's commit, overlapped with this claim and work
        self.pending = self.lane.submit(self.committer.commit, rows)
        return done


class SqliteFloor:
    def __init__(self, path: str, worker: str):
        self.bare = SqliteBare(path, worker)
        self.conn, self.worker = self.bare.conn, worker

    def backend_pids(self) -> list[int]:
        return []  # in-process: the client's CPU is all of it

    def settle(self) -> None:
        pass

    def step(self, batch: int) -> int:
        claimed = self.bare.claim(batch)
        if not claimed:
            return -1
        return self.bare.commit([(key, token, *_work(key, url)) for key, token, url in claimed])


# The same seed statements on the product's own tables (recovery_task, recovery_attempt,
# recovery_observation: their indexes and deferred foreign keys included). Engine / this floor
# is the cost of the engine itself; this floor / the bare floor is the cost of the schema.
PG_SCHEMA_CLAIM = f"""
UPDATE recovery_task AS t SET state = 'leased', lease_owner = %s,
    lease_until = now() + interval '{LEASE} seconds',
    next_attempt_at = now() + interval '{LEASE} seconds',
    lease_token = t.lease_token + 1, attempt_count = t.attempt_count + 1
FROM (
    SELECT id FROM recovery_task
    WHERE state IN ('pending', 'retry_wait', 'leased') AND next_attempt_at <= now()
    ORDER BY priority DESC, next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED
) AS c
WHERE t.id = c.id
RETURNING t.id, t.lease_token, t.url, t.run_id, t.partition
"""
SCHEMA_FENCE = (
    "UPDATE recovery_task SET state = 'committed', lease_owner = '', lease_until = NULL "
    "WHERE id = %s AND lease_owner = %s AND lease_token = %s RETURNING id"
)
SCHEMA_ATTEMPT = (
    "INSERT INTO recovery_attempt (id, task_id, run_id, lease_token, worker, scraper_version, "
    "started_at, finished_at, http_status, outcome, error_class, error_detail, payload_hash) "
    "VALUES (%s, %s, %s, %s, %s, '1', %s, %s, 200, 'committed', '', '', %s)"
)
SCHEMA_OBSERVATION = (
    'INSERT INTO recovery_observation (run_id, observation_key, entity_key, "window", '
    "partition, payload, payload_hash, source_task_id, source_attempt_id, scraper_version, "
    "validation_state, version, observed_at, updated_at) "
    "VALUES (%s, %s, %s, 'w', %s, %s, %s, %s, %s, '1', 'pending', 1, %s, %s) "
    "ON CONFLICT (observation_key) DO UPDATE SET payload = EXCLUDED.payload, "
    "payload_hash = EXCLUDED.payload_hash, source_task_id = EXCLUDED.source_task_id "
    "WHERE recovery_observation.payload_hash <> EXCLUDED.payload_hash"
)


SQLITE_SCHEMA_CLAIM = f"""
UPDATE recovery_task SET state = 'leased', lease_owner = ?,
    lease_until = {SQLITE_LATER}, next_attempt_at = {SQLITE_LATER},
    lease_token = lease_token + 1, attempt_count = attempt_count + 1
WHERE id IN (
    SELECT id FROM recovery_task
    WHERE state IN ('pending', 'retry_wait', 'leased') AND next_attempt_at <= {SQLITE_NOW}
    ORDER BY priority DESC, next_attempt_at LIMIT ?
)
RETURNING id, lease_token, url, run_id, partition
"""


class PgSchemaFloor(PgFloor):
    def step(self, batch: int) -> int:
        from datetime import UTC, datetime

        with self.conn.cursor() as cur:
            cur.execute(PG_SCHEMA_CLAIM, [self.worker, batch])
            claimed = cur.fetchall()
        if not claimed:
            return -1
        now = datetime.now(UTC)
        work = [(pk, tok, run, part, *_work(str(pk), url)) for pk, tok, url, run, part in claimed]
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(
                SCHEMA_FENCE, [(pk, self.worker, tok) for pk, tok, *_ in work], returning=True
            )
            fenced = fenced_keys(cur)
            won = [(uuid.uuid4(), *w) for w in work if w[0] in fenced]
            cur.executemany(
                SCHEMA_ATTEMPT,
                [
                    (a, pk, run, tok, self.worker, now, now, h)
                    for a, pk, tok, run, _p, _j, h, _o in won
                ],
            )
            cur.executemany(
                SCHEMA_OBSERVATION,
                [(run, o, o, part, j, h, pk, a, now, now) for a, pk, _t, run, part, j, h, o in won],
            )
        return len(won)


class SqliteSchemaFloor(SqliteFloor):
    def step(self, batch: int) -> int:
        from datetime import UTC, datetime

        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        claimed = cur.execute(SQLITE_SCHEMA_CLAIM, [self.worker, batch]).fetchall()
        cur.execute("COMMIT")
        if not claimed:
            return -1
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        work = [(pk, tok, run, part, *_work(str(pk), url)) for pk, tok, url, run, part in claimed]
        cur.execute("BEGIN IMMEDIATE")
        won = []
        for w in work:
            cur.execute(SCHEMA_FENCE.replace("%s", "?"), (w[0], self.worker, w[1]))
            if cur.fetchall():
                won.append((uuid.uuid4().hex, *w))
        cur.executemany(
            SCHEMA_ATTEMPT.replace("%s", "?"),
            [(a, pk, run, tok, self.worker, now, now, h) for a, pk, tok, run, _p, _j, h, _o in won],
        )
        cur.executemany(
            SCHEMA_OBSERVATION.replace("%s", "?"),
            [(run, o, o, part, j, h, pk, a, now, now) for a, pk, _t, run, part, j, h, o in won],
        )
        cur.execute("COMMIT")
        return len(won)


class Engine:
    """run_forever's step: pipelined on PostgreSQL (batch N commits on a second connection
    while N+1 is claimed and run, recovery.commit_lane), one batch at a time on SQLite."""

    def __init__(self, worker: str, pipelined: bool = True):
        import django

        django.setup()
        from django.db import connection

        from recovery import worker as engine_worker
        from recovery.commit_lane import CommitLane

        connection.ensure_connection()
        self.worker_mod = engine_worker
        self.worker = worker
        self.lane = CommitLane() if pipelined and engine_worker.pipelines() else None

    def step(self, batch: int) -> int:
        if self.lane is None:
            result = self.worker_mod.run_batch(self.worker, batch_size=batch, concurrency=batch)
        else:
            result = self.worker_mod.run_pipelined_batch(
                self.worker, self.lane, batch_size=batch, concurrency=batch
            )
        if not result:
            return -1
        return result.summary.committed

    def settle(self) -> None:
        """The slice is over: collect the outstanding commit (outside every measured span)."""
        if self.lane is not None:
            self.lane.wait()


def child(kind, db, target, index, batch, control, results):
    """One worker process of one kind: set up once, then run every slice given to its kind.

    control: (active kind's index, slice number, start, end) in shared memory; -1 = nobody's
    turn, -2 = exit. Per slice it reports the tasks committed between its first and last step
    boundaries inside [start, end], that span, and the CPU used over it by this process and
    its threads (the database's backends are read by the parent, DatabaseCpu: all of them).
    """
    worker = f"bench-{kind}-{index}"
    if kind in ("engine", "engine_serial"):
        impl = Engine(worker, pipelined=kind == "engine")
    elif kind == "schema_floor":
        impl = (
            PgSchemaFloor(target, worker)
            if db == "postgresql"
            else SqliteSchemaFloor(target, worker)
        )
    elif kind == "floor_pipelined":
        impl = PgPipelinedFloor(target, worker)
    elif db == "postgresql":
        impl = PgFloor(target, worker)
    else:
        impl = SqliteFloor(target, worker)
    # One unmeasured step before "ready": imports, the event loop, the provider and the
    # prepared statements are set up outside every slice, for every kind alike.
    impl.step(batch)
    results.put(("ready", index))
    mine, done = ALL_KINDS.index(kind), 0
    active, slice_no, start_at, end_at = control
    while active.value != -2:
        if active.value != mine or slice_no.value == done:
            time.sleep(0.005)
            continue
        done, start, end = slice_no.value, start_at.value, end_at.value
        counted, dry, first, last = 0, False, None, None
        while True:
            n = impl.step(batch)
            now = time.monotonic()
            if n < 0:
                dry = now < end
                break
            if start <= now and (now <= end or last is None):
                # CPU is read at step boundaries: tasks of the steps between the two reads.
                # A slice on a loaded box may see a step longer than its window: it then runs
                # on to its second boundary, so every slice measures at least one whole step.
                mark = (now, time.process_time())
                if first is None:
                    first = mark
                else:
                    counted += n
                    last = mark
            if now > end and last is not None:
                break
        impl.settle()
        span = (0.0, 0.0, 0.0, 0.0)  # wall seconds, client CPU seconds, first and last time
        if last is not None:
            span = (last[0] - first[0], last[1] - first[1], first[0], last[0])
        results.put(("slice", done, index, counted, dry, span))


# --- data loading -------------------------------------------------------------------------------


def pg_admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def pg_load(url: str, n: int, product_n: int | None = None) -> None:
    """n tasks in the floor's table, product_n (default n) in recovery_task."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE floor_tasks, floor_attempts, floor_observations, recovery_attempt, "
            "recovery_observation, recovery_taskcountdelta, recovery_workerheartbeat, "
            "recovery_task CASCADE"
        )
        conn.execute(
            "INSERT INTO floor_tasks (task_key, state, next_attempt_at, url) "
            "SELECT md5(i::text) || md5((-i)::text), 'pending', now() - interval '1 minute', "
            "'http://shop.test/item/' || i FROM generate_series(1, %s) AS i",
            [n],
        )
        run_id = conn.execute("SELECT id FROM recovery_run LIMIT 1").fetchone()[0]
        conn.execute(
            "INSERT INTO recovery_task (run_id, task_key, url, page_type, partition, priority, "
            "discovery, depth, navigation, state, attempt_count, next_attempt_at, lease_owner, "
            "lease_token, last_error_class, created_at, state_changed_at) "
            "SELECT %s, md5(i::text) || md5((-i)::text), 'http://shop.test/item/' || i, "
            "'product', 'p' || mod(i, 4), 0, 'manifest', 0, '{}'::jsonb, 'pending', 0, "
            "now() - interval '1 minute', '', 0, '', now(), now() "
            "FROM generate_series(1, %s) AS i",
            [run_id, product_n or n],
        )
        conn.execute(
            "INSERT INTO recovery_taskcountdelta (run_id, partition, state, delta) "
            "SELECT %s, partition, 'pending', count(*) FROM recovery_task GROUP BY partition",
            [run_id],
        )
        conn.execute("VACUUM ANALYZE floor_tasks")
        conn.execute("VACUUM ANALYZE recovery_task")
        conn.execute("CHECKPOINT")


def sqlite_load(path: str, n: int, product_n: int | None = None) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    cur = conn.cursor()
    cur.execute("BEGIN IMMEDIATE")
    for table in (
        "floor_tasks",
        "floor_attempts",
        "floor_observations",
        "recovery_observation",
        "recovery_attempt",
        "recovery_taskcountdelta",
        "recovery_workerheartbeat",
        "recovery_task",
    ):
        cur.execute(f"DELETE FROM {table}")
    series = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
    past = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-60 seconds')"
    cur.execute(
        series + "INSERT INTO floor_tasks (task_key, state, next_attempt_at, url) "
        f"SELECT printf('%064d', i), 'pending', {past}, 'http://shop.test/item/' || i FROM s",
        [n],
    )
    run_id = cur.execute("SELECT id FROM recovery_run LIMIT 1").fetchone()[0]
    cur.execute(
        series + "INSERT INTO recovery_task (run_id, task_key, url, page_type, partition, "
        "priority, discovery, depth, navigation, state, attempt_count, next_attempt_at, "
        "lease_owner, lease_token, last_error_class, created_at, state_changed_at) "
        f"SELECT ?, printf('%064d', i), 'http://shop.test/item/' || i, 'product', "
        f"'p' || (i % 4), 0, 'manifest', 0, '{{}}', 'pending', 0, {past}, '', 0, '', "
        f"{past}, {past} FROM s",
        [product_n or n, run_id],
    )
    cur.execute(
        "INSERT INTO recovery_taskcountdelta (run_id, partition, state, delta) "
        "SELECT ?, partition, 'pending', count(*) FROM recovery_task GROUP BY partition",
        [run_id],
    )
    cur.execute("COMMIT")
    cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def prepare_engine_database(db_url: str, env: dict[str, str]) -> None:
    """Migrate the engine's schema and create one noop dataset and run."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    code = (
        "import django; django.setup(); "
        "from recovery.models import Dataset, Run; "
        "d, _ = Dataset.objects.get_or_create(name='bench', defaults=dict(spec={'name': "
        "'bench', 'provider': 'noop'}, spec_sha256='0' * 64, provider='noop')); "
        "Run.objects.get_or_create(dataset=d, window='w')"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)


# --- measuring ----------------------------------------------------------------------------------


def backend_cpu(pids: list[int]) -> float:
    """CPU seconds used so far by PostgreSQL backends (same machine: read from /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(
    db, target, workers, rounds, settle, window, log, kinds=KINDS
) -> tuple[list[dict], bool, list[int]]:
    """Every kind's workers started once and kept; then `rounds` rounds of one slice per kind
    (ABC, then CBA), each slice `window` seconds after `settle`, only that kind running.

    Returns samples[round][kind] = (tasks/s, CPU ms per task of the workers and of every
    backend of the database, of which the backends'), whether a worker ran out of tasks, and
    the pids of every backend counted. The order of the kinds rotates by one each round
    (ABC, BCA, CAB), so no kind always sits in the middle.
    The box's speed drifts over seconds to minutes (the floor alone moved x1.3-1.7 between
    runs of 2026-12-01); slices of a few seconds, alternated, put that drift on every kind
    alike, where one window per kind per repetition put it on whichever kind it fell on.
    """
    ctx = mp.get_context("spawn")  # children set up Django themselves, from the environment
    results = ctx.Queue()
    control = (ctx.Value("i", -1), ctx.Value("i", 0), ctx.Value("d", 0.0), ctx.Value("d", 0.0))
    active, slice_no, start_at, end_at = control
    procs = [
        ctx.Process(target=child, args=(kind, db, target, i, BATCH, control, results))
        for kind in kinds
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    samples: list[dict] = []
    dry, pids = False, []
    # Every backend of the bench's database, every slice, whoever opened it (a reconnecting
    # engine's new backend included); only one kind runs at a time, the others sit idle.
    accounting = DatabaseCpu(target) if db == "postgresql" else None
    try:
        for _ in procs:
            results.get(timeout=120)
        if accounting is not None:
            accounting.start()
        for r in range(rounds):
            sample = {}
            for kind in rotated(kinds, r):
                start_at.value = time.monotonic() + settle
                end_at.value = start_at.value + window
                slice_no.value += 1
                active.value = ALL_KINDS.index(kind)
                got = [results.get(timeout=settle + window + 300) for _ in range(workers)]
                active.value = -1
                rate = sum(n / span[0] for *_x, n, _d, span in got if span[0] > 0)
                tasks = sum(n for *_x, n, _d, _s in got)
                client = sum(span[1] for *_x, span in got)
                client_ms = client * 1000 / tasks if tasks else 0.0
                server_ms = 0.0
                spans = [span for *_x, span in got if span[0] > 0]
                if accounting is not None and spans and rate:
                    accounting.sample_now()
                    lo, hi = min(s[2] for s in spans), max(s[3] for s in spans)
                    # the database's CPU per second over the counted span / tasks per second
                    server_ms = accounting.between(lo, hi) / (hi - lo) / rate * 1000
                sample[kind] = (rate, client_ms + server_ms, server_ms)
                dry = dry or any(d for *_x, d, _s in got)
                log(
                    f"{db} workers={workers} round={r + 1} {kind}: {rate:,.0f} tasks/s, "
                    f"{sample[kind][1]:.3f} CPU ms/task ({sample[kind][2]:.3f} of it the "
                    f"database backends), load {os.getloadavg()[0]:.2f}"
                )
            samples.append(sample)
            if dry:
                break
    finally:
        active.value = -2
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        if accounting is not None:
            accounting.stop()
            pids = accounting.pids  # every backend counted (a reconnect shows as more pids)
    return samples, dry, pids


def summarise(
    db: str, workers: int, samples: list[dict], dry: bool, pids: list[int] | None = None
) -> dict:
    """One row of figures from paired repetitions: samples[i][kind] = (tasks/s, CPU ms/task,
    database backends' CPU ms/task) of repetition i. Every ratio is taken within a
    repetition, then the median over repetitions is reported."""
    med = statistics.median

    def rate(kind: str) -> float:
        return round(med(s[kind][0] for s in samples), 1)

    def cpu(kind: str, i: int) -> float:
        return round(med(s[kind][i] for s in samples), 3)

    def paired(a: str, b: str, i: int = 0) -> list[float]:
        return [s[a][i] / s[b][i] if s[b][i] else 0.0 for s in samples]

    bare = paired("engine", "floor")
    cpu_bare = paired("engine", "floor", 1)
    return {
        "db": db,
        "workers": workers,
        "batch": BATCH,
        "engine_per_s": rate("engine"),
        # The headline: against the seed's statements on bare two-index tables.
        "bare_floor_per_s": rate("floor"),
        "ratio": round(med(bare), 3),
        "ratio_min": round(min(bare), 3),
        "ratio_max": round(max(bare), 3),
        # Second figure: the same statements on the product's own tables (its indexes and
        # deferred foreign keys), so engine / schema floor is the engine's own cost.
        "schema_floor_per_s": rate("schema_floor"),
        "ratio_schema": round(med(paired("engine", "schema_floor")), 3),
        # CPU per task: the worker processes plus, on PostgreSQL, their backends.
        "engine_cpu_ms_per_task": cpu("engine", 1),
        "bare_floor_cpu_ms_per_task": cpu("floor", 1),
        "schema_floor_cpu_ms_per_task": cpu("schema_floor", 1),
        "cpu_ratio": round(med(cpu_bare), 3),
        "cpu_ratio_min": round(min(cpu_bare), 3),
        "cpu_ratio_max": round(max(cpu_bare), 3),
        # PostgreSQL's backends alone (0 on SQLite, which runs in the worker process).
        "engine_db_cpu_ms_per_task": cpu("engine", 2),
        "bare_floor_db_cpu_ms_per_task": cpu("floor", 2),
        "db_cpu_ratio": round(med(paired("engine", "floor", 2)), 3),
        "reps": len(samples),
        "ran_dry": dry,
        # every repetition's figures, per kind: [tasks/s, CPU ms/task, of it the backends']
        "samples": [{k: [round(x, 4) for x in v] for k, v in s.items()} for s in samples],
        # every backend of the database whose CPU was counted (all of them, by datname)
        "backend_pids_counted": list(pids or []),
        **(serial_figures(samples) if "engine_serial" in samples[0] else {}),
        **(pipelined_floor_figures(samples) if "floor_pipelined" in samples[0] else {}),
    }


def serial_figures(samples: list[dict]) -> dict:
    """--serial-engine: the engine one batch at a time (run_batch, as before the pipelined
    batches), paired with the pipelined engine and the floor in the same rounds."""
    med = statistics.median
    gain = [s["engine"][0] / s["engine_serial"][0] for s in samples if s["engine_serial"][0]]
    floor = [s["engine_serial"][0] / s["floor"][0] for s in samples if s["floor"][0]]
    cpu = [s["engine"][1] / s["engine_serial"][1] for s in samples if s["engine_serial"][1]]
    return {
        "engine_serial_per_s": round(med(s["engine_serial"][0] for s in samples), 1),
        "engine_serial_cpu_ms_per_task": round(med(s["engine_serial"][1] for s in samples), 3),
        "ratio_serial": round(med(floor), 3),
        "pipelined_gain": round(med(gain), 3),
        "pipelined_gain_min": round(min(gain), 3),
        "pipelined_gain_max": round(max(gain), 3),
        "pipelined_cpu_ratio": round(med(cpu), 3),
    }


def pipelined_floor_figures(samples: list[dict]) -> dict:
    """--pipelined-floor: the engine against the bare floor pipelined like it, same rounds."""
    med = statistics.median
    ratio = [s["engine"][0] / s["floor_pipelined"][0] for s in samples if s["floor_pipelined"][0]]
    cpu = [s["engine"][1] / s["floor_pipelined"][1] for s in samples if s["floor_pipelined"][1]]
    gain = [s["floor_pipelined"][0] / s["floor"][0] for s in samples if s["floor"][0]]
    return {
        "pipelined_floor_per_s": round(med(s["floor_pipelined"][0] for s in samples), 1),
        "pipelined_floor_cpu_ms_per_task": round(med(s["floor_pipelined"][1] for s in samples), 3),
        "ratio_pipelined_floor": round(med(ratio), 3),
        "ratio_pipelined_floor_min": round(min(ratio), 3),
        "ratio_pipelined_floor_max": round(max(ratio), 3),
        "cpu_ratio_pipelined_floor": round(med(cpu), 3),
        "cpu_ratio_pipelined_floor_min": round(min(cpu), 3),
        "cpu_ratio_pipelined_floor_max": round(max(cpu), 3),
        "floor_pipelined_gain": round(med(gain), 3),
    }


def run_suite(
    db, target, load, configs, rounds, settle, window, n_tasks, log, kinds=KINDS
) -> list[dict]:
    results = []
    for workers in configs:
        # One load per worker count: the floor's tasks, and as many of the product's for each
        # other kind (the schema floor and the engine, or engines, all take from them).
        floors = sum(kind in FLOOR_KINDS for kind in kinds)
        load(target, floors * n_tasks, (len(kinds) - floors) * n_tasks)
        samples, dry, pids = measure(db, target, workers, rounds, settle, window, log, kinds)
        results.append(summarise(db, workers, samples, dry, pids))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reps",
        type=int,
        default=10,
        help="rounds of one slice per kind (order rotated each round: ABC, BCA, CAB)",
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="measured part of a slice")
    parser.add_argument("--warmup", type=float, default=0.3, help="unmeasured start of a slice")
    parser.add_argument(
        "--tasks", type=int, default=300_000, help="floor tasks per worker count (product: 2x)"
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="an admin connection; the bench creates and drops its own database",
    )
    parser.add_argument("--pg-workers", default="1,2")
    parser.add_argument("--sqlite-workers", default="1,2")
    parser.add_argument("--skip-pg", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument(
        "--serial-engine",
        action="store_true",
        help="also run the engine one batch at a time (PostgreSQL: the pipelining lever's before)",
    )
    parser.add_argument(
        "--pipelined-floor",
        action="store_true",
        help="also run the bare floor pipelined like the engine (PostgreSQL): claim the next "
        "batch while the previous one commits on a second connection",
    )
    args = parser.parse_args()
    compile_bytecode(ROOT)
    pg_kinds = KINDS + ("engine_serial",) * args.serial_engine
    pg_kinds += ("floor_pipelined",) * args.pipelined_floor

    def log(message: str) -> None:
        print(message, flush=True)

    pg_configs = [] if args.skip_pg else [int(x) for x in args.pg_workers.split(",") if x]
    sqlite_configs = (
        [] if args.skip_sqlite else [int(x) for x in args.sqlite_workers.split(",") if x]
    )
    watch = LoadWatch(own_processes=max(pg_configs + sqlite_configs, default=1))
    work_dir = Path(tempfile.mkdtemp(prefix="salvage-bench-claim-"))
    base_env = dict(os.environ)
    base_env.update(
        {
            "DJANGO_SETTINGS_MODULE": "recovery.settings",
            "SALVAGE_INSECURE_DEV_KEY": "1",
            "SALVAGE_DATA_DIR": str(work_dir / "var"),
            "SALVAGE_LOG_LEVEL": "WARNING",
            "SALVAGE_LEASE_SECONDS": str(LEASE),
        }
    )
    base_env.pop("SALVAGE_FAULT_POINT", None)
    results: list[dict] = []
    notes: list[str] = []
    sys.path.insert(0, str(ROOT))
    try:
        if not args.skip_pg:
            db_name = f"bench_claim_{os.getpid()}"
            parts = urlsplit(args.pg_url)
            bench_url = urlunsplit(parts._replace(path=f"/{db_name}"))
            try:
                pg_admin(args.pg_url, f"DROP DATABASE IF EXISTS {db_name}")
                pg_admin(args.pg_url, f"CREATE DATABASE {db_name}")
            except Exception as exc:
                notes.append(f"PostgreSQL skipped: {exc}")
                log(notes[-1])
            else:
                try:
                    env = dict(base_env, DATABASE_URL=bench_url)
                    prepare_engine_database(bench_url, env)
                    pg_admin(bench_url, PG_FLOOR_SCHEMA)
                    os.environ.update(env)
                    results += run_suite(
                        "postgresql",
                        bench_url,
                        pg_load,
                        pg_configs,
                        args.reps,
                        args.warmup,
                        args.seconds,
                        args.tasks,
                        log,
                        pg_kinds,
                    )
                finally:
                    with contextlib.suppress(Exception):
                        pg_admin(args.pg_url, f"DROP DATABASE IF EXISTS {db_name} WITH (FORCE)")
        if not args.skip_sqlite:
            path = work_dir / "bench.sqlite3"
            env = dict(base_env, DATABASE_URL=f"sqlite:///{path}")
            prepare_engine_database(f"sqlite:///{path}", env)
            conn = sqlite3.connect(path)
            conn.executescript(SQLITE_FLOOR_SCHEMA)
            conn.close()
            os.environ.update(env)
            results += run_suite(
                "sqlite",
                str(path),
                sqlite_load,
                sqlite_configs,
                args.reps,
                args.warmup,
                args.seconds,
                args.tasks,
                log,
            )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    for r in results:
        log(
            f"{r['db']:>10} workers={r['workers']} batch={r['batch']}: engine "
            f"{r['engine_per_s']:,.0f}/s, bare floor {r['bare_floor_per_s']:,.0f}/s, ratio "
            f"{r['ratio']} [{r['ratio_min']}-{r['ratio_max']}]; schema floor "
            f"{r['schema_floor_per_s']:,.0f}/s, ratio {r['ratio_schema']}; CPU ms/task engine "
            f"{r['engine_cpu_ms_per_task']}, bare {r['bare_floor_cpu_ms_per_task']} "
            f"(x{r['cpu_ratio']}); database backends' CPU ms/task engine "
            f"{r['engine_db_cpu_ms_per_task']}, bare {r['bare_floor_db_cpu_ms_per_task']} "
            f"(x{r['db_cpu_ratio']})" + (" (ran dry!)" if r["ran_dry"] else "")
        )
        if "ratio_pipelined_floor" in r:
            log(
                f"{r['db']:>10} workers={r['workers']}: bare floor pipelined "
                f"{r['pipelined_floor_per_s']:,.0f}/s, engine / it {r['ratio_pipelined_floor']} "
                f"[{r['ratio_pipelined_floor_min']}-{r['ratio_pipelined_floor_max']}], CPU "
                f"x{r['cpu_ratio_pipelined_floor']}; pipelined floor / serial floor "
                f"x{r['floor_pipelined_gain']}"
            )
        if "pipelined_gain" in r:
            log(
                f"{r['db']:>10} workers={r['workers']}: engine one batch at a time "
                f"{r['engine_serial_per_s']:,.0f}/s, ratio {r['ratio_serial']}; pipelined / "
                f"one at a time x{r['pipelined_gain']} [{r['pipelined_gain_min']}-"
                f"{r['pipelined_gain_max']}], CPU per task x{r['pipelined_cpu_ratio']}"
            )
    summary = {"bench": "claim", "results": results, "notes": notes, **watch.finish()}
    if any(r["ran_dry"] for r in results):  # a worker idled inside the window: rates too low
        summary["headline"] = False
        summary["headline_reason"] = "a worker ran out of tasks inside the window (--tasks)"
    spread = ("ratio", "cpu_ratio", "ratio_pipelined_floor", "cpu_ratio_pipelined_floor")
    refuse_if_spread(summary, spread, lambda r: f"{r['db']} x{r['workers']}")
    summary["command"] = " ".join(["python", "bench/claim.py", *sys.argv[1:]])
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
