"""What several benches share: the sandbox shop in its own process (scrape, browser), the
scratch PostgreSQL database and the generated run of tasks and observations (export,
validation), reading a fenced executemany's winners (the bare floor, the schema floor), and
the project's bytecode compiled before anything is timed."""

from __future__ import annotations

import compileall
import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
_LISTENING = re.compile(r"sandbox listening on (http://\S+?)/? ")


# --- the spread rule -----------------------------------------------------------------------------

# A quiet box by the load rules can still be an unsteady one: the claim floor's own speed moved
# x1.3-1.7 between runs of 2026-12-01 with 0% foreign CPU. A run whose paired ratio spreads
# wider than this over its repetitions is not a headline (bench/README.md).
SPREAD_LIMIT = 1.5


def spread_verdict(rows: list[dict], ratios: tuple[str, ...], label) -> str:
    """Why a run's repetitions disagree too much to headline it ("" when they do not).

    Each row carries, for each named ratio, its lowest and highest repetition as
    `<name>_min` and `<name>_max`; `label(row)` names the row in the reason."""
    for row in rows:
        for name in ratios:
            low, high = row.get(f"{name}_min"), row.get(f"{name}_max")
            if low and high and high / low > SPREAD_LIMIT:
                return (
                    f"{label(row)}: {name} spread {low}-{high} over the repetitions "
                    f"(x{high / low:.2f} > x{SPREAD_LIMIT})"
                )
    return ""


def refuse_if_spread(summary: dict, ratios: tuple[str, ...], label) -> None:
    """Mark `summary` (a bench's JSON line) no headline when the spread rule says so."""
    reason = spread_verdict(summary["results"], ratios, label)
    if reason and summary.get("headline"):
        summary["headline"] = False
        summary["headline_reason"] = reason
        print(f"headline: NO after all ({reason})", flush=True)  # the load line said yes


# --- CPU of every backend of a database -------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc (OSError once it has gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class DatabaseCpu:
    """CPU of ALL the PostgreSQL backends of one database, read from /proc in a thread.

    Every `interval` the backends of `datname` are listed from pg_stat_activity (on a
    connection to the maintenance database, so this thread's own backend is never counted)
    and each one's /proc/<pid>/stat read. A backend present at start counts from its reading
    then; one that appears later counts from zero (a new backend starts with ~no CPU); one
    that vanishes counts up to its last reading. So a client that reconnects (Django's
    close_old_connections after CONN_MAX_AGE) is followed to its new backend, where a list of
    pids taken once at start lost it silently. `timeline` holds (monotonic time, total CPU
    seconds so far); `between(a, b)` interpolates it; `pids` is every backend counted."""

    def __init__(self, database_url: str, interval: float = 0.05) -> None:
        import threading

        parts = urlsplit(database_url)
        self.datname = parts.path.lstrip("/")
        self.admin = urlunsplit(parts._replace(path="/postgres"))
        self.interval = interval
        self.base: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.timeline: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> DatabaseCpu:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"no pg_stat_activity reading of {self.datname} in 30 s")

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=10)
            self.sample_now()  # one last reading of the backends still alive

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            self._conn = conn
            first = True
            while True:
                self._read(conn, first)
                first = False
                self._ready.set()
                if self._stop.wait(self.interval):
                    break
            self._conn = None

    def sample_now(self) -> None:
        """A reading outside the thread's rhythm (a slice's ends): /proc of the known pids."""
        with self._lock:
            for pid in list(self.last):
                with contextlib.suppress(OSError, IndexError, ValueError):
                    self.last[pid] = proc_cpu_seconds(pid)
            self.timeline.append((time.monotonic(), self._total()))

    def _read(self, conn, first: bool) -> None:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.datname,)
        ).fetchall()
        with self._lock:
            for (pid,) in rows:
                try:
                    cpu = proc_cpu_seconds(pid)
                except (OSError, IndexError, ValueError):
                    continue  # gone between the listing and the read
                if pid not in self.base:
                    self.base[pid] = cpu if first else 0.0
                self.last[pid] = cpu
            # the pids seen before and no longer listed keep their last reading; a live one
            # not listed this time (a listing's race) is read again
            for pid in self.last.keys() - {pid for (pid,) in rows}:
                with contextlib.suppress(OSError, IndexError, ValueError):
                    self.last[pid] = proc_cpu_seconds(pid)
            self.timeline.append((time.monotonic(), self._total()))

    def _total(self) -> float:
        return sum(self.last[pid] - self.base[pid] for pid in self.last)

    def seconds(self) -> float:
        """Total CPU seconds of every backend counted, since start."""
        with self._lock:
            return self._total()

    @property
    def pids(self) -> list[int]:
        with self._lock:
            return sorted(self.last)

    def per_pid(self) -> dict[int, float]:
        with self._lock:
            return {pid: self.last[pid] - self.base[pid] for pid in self.last}

    def at(self, when: float) -> float:
        """The total at monotonic time `when`, interpolated between the two readings around it."""
        with self._lock:
            line = list(self.timeline)
        if not line:
            return 0.0
        if when <= line[0][0]:
            return line[0][1]
        for (t0, v0), (t1, v1) in itertools.pairwise(line):
            if t0 <= when <= t1:
                return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)
        return line[-1][1]

    def between(self, start: float, end: float) -> float:
        return self.at(end) - self.at(start)


def tree_bytes(root: Path) -> tuple[int, int]:
    """Bytes and files under `root` (0, 0 when it does not exist)."""
    total = files = 0
    for path in root.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
            files += 1
    return total, files


def rotated(kinds: tuple[str, ...], rep: int) -> tuple[str, ...]:
    """The order of the sides in repetition `rep`: rotated by one each repetition (ABC, BCA,
    CAB, ...), so every side sits in every position equally often and none always in the
    middle (ABC then CBA kept B there)."""
    k = rep % len(kinds) if kinds else 0
    return tuple(kinds[k:]) + tuple(kinds[:k])


# --- bytecode ---------------------------------------------------------------------------------


def compile_bytecode(*roots: Path) -> None:
    """Compile the project's modules in each checkout, as a non-editable install does.

    The peers' packages (Scrapy, aiohttp, Django) were compiled when pip installed them; the
    project is installed editable, so where PYTHONDONTWRITEBYTECODE is set (this machine, most
    container images) every process it starts compiled ~70 modules from source, ~0.1 s of CPU
    each start that no deployment pays."""
    for root in roots:
        for package in ("recovery", "dashboard"):
            compileall.compile_dir(str(root / package), quiet=1)


# --- the sandbox shop, in its own process -----------------------------------------------------


class SandboxProcess:
    """`manage.py sandbox --port 0 --faults none`, started and waited for (its listening line).

    `extra` adds sandbox options (e.g. --spec-out); `prefix` runs it under a command (e.g.
    bench/netns.py's `ip netns exec`). It needs no database: DATABASE_URL is dropped from its
    environment."""

    def __init__(self, pages: int, workdir: Path, extra: list[str] | tuple[str, ...] = (),
                 prefix: list[str] | tuple[str, ...] = (), name: str = "sandbox-var"):  # fmt: skip
        cmd = [*prefix, PY, str(ROOT / "manage.py"), "sandbox", "--port", "0", "--pages",
               str(pages), "--faults", "none", *extra]  # fmt: skip
        env = {**os.environ, "SALVAGE_INSECURE_DEV_KEY": "1", "PYTHONUNBUFFERED": "1"}
        env["SALVAGE_DATA_DIR"] = str(workdir / name)
        env.pop("DATABASE_URL", None)
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            match = _LISTENING.search(line)
            if match:
                self.base_url = match.group(1)
                return
        self.stop()
        raise RuntimeError("sandbox did not start:\n" + "".join(seen))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- a scratch PostgreSQL database ------------------------------------------------------------


def server_url() -> str:
    url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL") or ""
    if not url.startswith(("postgres://", "postgresql://")):
        url = "postgres://postgres@127.0.0.1:5432/postgres"
    return url


def scratch_database(name: str) -> str:
    import psycopg

    parts = urlsplit(server_url())
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}"))


def drop_database(name: str) -> None:
    import psycopg
    from django.conf import settings
    from django.db import connections

    if settings.configured:  # a bench that runs the engine in process: its connections go first
        connections.close_all()
    admin_url = urlunsplit(urlsplit(server_url())._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


# --- a generated run, in SQL (PostgreSQL) -----------------------------------------------------


def generate_run(
    run_id: int, window: str, n: int, partitions: int, payload_sql: str, validation_state: str
) -> None:
    """n committed tasks of one run over `partitions` hosts, and one observation per task.

    `payload_sql`: a jsonb expression over the task row `t` (the bench's own payload);
    `validation_state`: the state every observation starts in."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO recovery_task (
                run_id, task_key, url, page_type, partition, priority, discovery, navigation,
                state, attempt_count, next_attempt_at, lease_owner, lease_token,
                last_error_class, created_at, state_changed_at, depth)
            SELECT %s, md5(%s || g::text) || md5(g::text || %s),
                   'https://shop' || (g %% %s) || '.test/product/' || g, 'product',
                   'shop' || (g %% %s), 0, 'manifest', '{}'::jsonb, 'committed', 1, now(), '',
                   1, '', now(), now(), 0
            FROM generate_series(1, %s) AS g
            """,
            [run_id, window, window, partitions, partitions, n],
        )
        cursor.execute(
            f"""
            INSERT INTO recovery_observation (
                run_id, observation_key, entity_key, "window", partition, payload, payload_hash,
                source_task_id, source_task_key, scraper_version, validation_state, version,
                observed_at, updated_at)
            SELECT t.run_id, md5('o' || t.task_key) || md5(t.task_key), 'SKU-' || t.id, %s,
                   t.partition, {payload_sql},
                   md5(t.task_key) || md5(t.url), t.id, t.task_key, '1', %s, 1, now(), now()
            FROM recovery_task t WHERE t.run_id = %s
            """,
            [window, validation_state, run_id],
        )
        cursor.execute("UPDATE recovery_run SET task_total = %s WHERE id = %s", [n, run_id])


# --- the floors' fenced commit ----------------------------------------------------------------


def fenced_keys(cur) -> set:
    """The keys a psycopg `executemany(..., returning=True)` of fenced UPDATEs returned: the
    rows whose lease token still matched (one result set per statement)."""
    fenced = set()
    while True:
        row = cur.fetchone()
        if row:
            fenced.add(row[0])
        if not cur.nextset():
            break
    return fenced


def explain(
    queries: list[dict], tables: tuple[str, ...], prefixes: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """EXPLAIN each SELECT of `queries` (CaptureQueriesContext's): (the queries whose plan reads
    one of `tables` sequentially, with the plan; the indexes read on them: an index scan on one
    of `tables`, or an index whose name begins with one of `prefixes`)."""
    from django.db import connection

    names = "|".join(tables)
    seq_scan = re.compile(rf"Seq Scan on ({names})\b")
    index_scan = re.compile(
        r"(?:Index|Index Only|Bitmap Index) Scan(?: Backward)? (?:using|on) (\w+)"
        rf"(?: on ({names})\b)?"
    )
    marks = (*tables, *(f" {prefix}" for prefix in prefixes))
    bad = []
    indexes: set[str] = set()
    with connection.cursor() as cursor:
        for query in queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            if seq_scan.search(plan):
                bad.append(sql[:300] + "\n" + plan)
            for line in plan.splitlines():
                found = index_scan.search(line)
                if found and (found.group(2) or any(mark in line for mark in marks)):
                    indexes.add(found.group(1))
    return bad, sorted(indexes)
