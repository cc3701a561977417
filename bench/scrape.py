"""Scraping at equal cores: N Salvage workers, tuned Scrapy in N processes, and the floor.

    python bench/scrape.py [--pages 5000] [--workers 2] [--concurrency 16] [--reps 2]
                           [--dbs postgres,sqlite] [--no-scrapy] [--with-untuned]
                           [--scrapy-pg] [--scrapy-sweep] [--pipelined-floor]

   --scrapy-pg: Scrapy writes its items to PostgreSQL (batches of 50, executemany upsert),
   its backends counted; --scrapy-sweep: the peer is the fastest of 8 Scrapy configurations
   (reactor, middlewares/extensions off, requests in flight), tried once each per worker
   count; --pipelined-floor: the floor also pipelined like the engine (a side of its own).

1. The sandbox shop runs in its own process (`manage.py sandbox --port 0`, no faults), so it
   is never one of the measured clients. Its capacity is measured first with a quick
   concurrent aiohttp fetch of every page (which also warms its page cache), and its CPU per
   page is read from /proc during every run: it must be far below any client's.
2. For each database and worker count N, every side runs in N processes with the concurrency
   split between them (16 in flight in total = 8 per process at N = 2), on the same pages:
   - salvage: a fresh run of the same manifest (`createrun`), then N processes of
     `manage.py work --until-idle`: fetch, page checks, extraction, and a durable commit per
     claimed batch of 50 (attempts + observations + task states in one transaction); the run
     is checked afterwards (every task committed, one observation per page);
   - scrapy: bench/scrapy_shop.py tuned (CONCURRENT_ITEMS=1: research/perf-baselines.md,
     section 4), N processes, each crawling every N-th page of the manifest, CSS-parsing the
     same fields and writing JSON lines (`--with-untuned` adds Scrapy's defaults as a fourth
     side);
   - floor: N processes of bench/scrape_floor.py: aiohttp + the product's page checks and
     fields + claim/commit by 50 on bare two-index tables the bench creates.
   The sides' order rotates by one each repetition (ABC, BCA, CAB: paired, and no side
   always in the middle), 5 repetitions by default. Each side is timed as whole processes,
   start to exit (start-up included).
3. CPU per page = the side's processes' own CPU (rusage) plus, on PostgreSQL, the CPU of the
   database's backends: ALL of them, by datname, every 50 ms (common.DatabaseCpu); the
   sandbox's CPU is not in it. The spread rule judges the pages/s and CPU ratios; every
   repetition's figures are in the JSON line (`samples`).
4. Prints one line per measurement and, last, one JSON line:
   {"bench": "scrape", "results": [{"db", "workers", "pages_per_s", "scrapy_pages_per_s",
   "floor_pages_per_s", "ratio_scrapy", "ratio_floor", "cpu_ratio_scrapy", ...}],
   "loadavg_before", "loadavg_after", "headline", ...}; every ratio = Salvage / other of the
   same repetition, median over repetitions (bench/loadwatch.py says when it may headline).

PostgreSQL: BENCH_DATABASE_URL (or DATABASE_URL) names the server; the benchmark drops and
creates its own database (--pg-name, or BENCH_PG_NAME) there, and drops it at the end unless
--keep. SQLite: a file in a temporary
directory. BENCH_PAGES sets the default page count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bare_floor import PG_FLOOR_SCHEMA, SQLITE_FLOOR_SCHEMA
from common import DatabaseCpu, SandboxProcess, compile_bytecode, refuse_if_spread, rotated
from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# --- the sandbox, in its own process ---------------------------------------------------------


class Sandbox(SandboxProcess):
    """The sandbox shop, writing the bench's spec and manifest."""

    def __init__(self, pages: int, workdir: Path, concurrency: int) -> None:
        self.spec = workdir / "shop.toml"
        self.manifest = workdir / "shop.csv"
        super().__init__(pages, workdir, [
            "--spec-out", str(self.spec), "--manifest-out", str(self.manifest),
            "--dataset-name", "bench-shop",
        ])  # fmt: skip

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)


def product_urls(manifest: Path) -> list[str]:
    with open(manifest, newline="") as fh:
        return [row["url"] for row in csv.DictReader(fh) if row["page_type"] == "product"]


async def _fetch_all(urls: list[str], concurrency: int) -> tuple[int, float]:
    import aiohttp

    queue = list(reversed(urls))
    done = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def lane() -> None:
            nonlocal done
            while queue:
                url = queue.pop()
                async with session.get(url) as r:
                    await r.read()
                    if r.status == 200:
                        done += 1

        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        return done, time.perf_counter() - start


def sandbox_capacity(sandbox: Sandbox, urls: list[str], concurrency: int = 64) -> dict[str, Any]:
    """Warm the page cache, then time one concurrent pass with the cheapest client we have."""
    asyncio.run(_fetch_all(urls, concurrency))  # first pass renders and caches every page
    cpu0 = sandbox.cpu()
    ok, elapsed = asyncio.run(_fetch_all(urls, concurrency))
    server_cpu = sandbox.cpu() - cpu0
    return {
        "pages_per_s": round(ok / elapsed, 1),
        "client": f"aiohttp x{concurrency} in the harness process",
        "server_cpu_ms_per_page": round(1000 * server_cpu / max(ok, 1), 3),
        # What one core of sandbox could serve if the client cost nothing.
        "server_pages_per_cpu_s": round(ok / server_cpu, 0) if server_cpu else None,
        "complete": ok == len(urls),
    }


# --- a process, timed start to exit, with its CPU --------------------------------------------


def run_timed(cmds: list[list[str]], env: dict[str, str], sandbox: Sandbox) -> dict[str, Any]:
    """Start every command at once; wall time until the last exits, and their summed CPU."""
    children0 = _children_cpu()
    sb_cpu0 = sandbox.cpu()
    start = time.perf_counter()
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for cmd in cmds
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate()  # drains the pipes and reaps the child
            outputs.append((proc.returncode, out.decode(), err.decode()))
    finally:  # interrupted (SIGTERM/SIGINT): leave no measured process behind
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        # Reaped children only: the sandbox is still running, so it is not in this figure.
        "cpu_s": _children_cpu() - children0,
        "sandbox_cpu_s": sandbox.cpu() - sb_cpu0,
        "outputs": outputs,
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def base_env(workdir: Path) -> dict[str, str]:
    env = {**os.environ, "SALVAGE_INSECURE_DEV_KEY": "1", "PYTHONUNBUFFERED": "1"}
    env["SALVAGE_DATA_DIR"] = str(workdir / "var")
    env["SALVAGE_ALLOWED_NETWORKS"] = "127.0.0.0/8"
    env["SALVAGE_LOG_LEVEL"] = "WARNING"
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


# --- Scrapy --------------------------------------------------------------------------------


def sweep_configs(per_process: int) -> list[list[str]]:
    """Scrapy's settings the sweep tries (scrapy_shop.py options): reactor x middlewares and
    extensions on/off x requests in flight per process (per domain: the same)."""
    return [
        ["--reactor", reactor, *(["--lean"] if lean else []), "--concurrency", str(c)]
        for reactor in ("asyncio", "epoll")
        for lean in (False, True)
        for c in (per_process, 2 * per_process)
    ]


def sweep_scrapy(sandbox, workdir, concurrency, pages, processes, pg_url) -> dict[str, Any]:
    """One run of tuned Scrapy per configuration; the fastest (pages/s) is the peer."""
    tried = []
    for extra in sweep_configs(max(1, concurrency // processes)):
        got = run_scrapy(
            sandbox, workdir, concurrency, pages, processes, True, pg_url=pg_url, extra=extra
        )
        keep = ("pages_per_s", "cpu_ms_per_page", "complete")
        tried.append({"args": extra, **{k: got[k] for k in keep}})
        log(f"scrapy sweep x{processes} {' '.join(extra)}: {got['pages_per_s']} p/s")
    best = max((t for t in tried if t["complete"]), key=lambda t: t["pages_per_s"])
    return {"best": best["args"], "tried": tried}


def split_manifests(manifest: Path, workdir: Path, parts: int) -> list[Path]:
    """Every parts-th product URL into its own manifest, one per Scrapy process."""
    urls = product_urls(manifest)
    out = []
    for i in range(parts):
        path = workdir / f"scrapy-part-{parts}-{i}.csv"
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["url", "page_type"])
            writer.writerows([url, "product"] for url in urls[i::parts])
        out.append(path)
    return out


def run_scrapy(
    sandbox: Sandbox, workdir: Path, concurrency: int, pages: int, processes: int, tuned: bool,
    pg_url: str = "", extra: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:  # fmt: skip
    """`pg_url`: the items go to PostgreSQL (scrapy_shop.py --pg, batches of 50), and the
    database's backends' CPU is counted as for the other sides."""
    per_process = max(1, concurrency // processes)
    cmds = []
    for i, part in enumerate(split_manifests(sandbox.manifest, workdir, processes)):
        out = workdir / f"scrapy-{'tuned' if tuned else 'default'}-{i}.jsonl"
        cmd = [
            PY, str(ROOT / "bench" / "scrapy_shop.py"), "--manifest", str(part),
            "--concurrency", str(per_process), "--out", str(out),
        ]  # fmt: skip
        if tuned:
            cmd.append("--tuned")
        if pg_url:
            cmd += ["--pg", pg_url]
        cmds.append(cmd + list(extra))
    db_cpu = 0.0
    if pg_url:
        import psycopg
        from scrapy_shop import SCRAPY_PG_SCHEMA

        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(SCRAPY_PG_SCHEMA)
        with BackendCpu(pg_url) as sampler:
            timed = run_timed(cmds, base_env(workdir), sandbox)
        db_cpu = sampler.seconds()
    else:
        timed = run_timed(cmds, base_env(workdir), sandbox)
    items = 0
    for code, stdout, stderr in timed["outputs"]:
        if code != 0:
            raise RuntimeError(f"scrapy failed ({code}):\n{stderr[-3000:]}")
        items += json.loads(stdout.strip().splitlines()[-1])["items"]
    return {
        "pages_per_s": round(items / timed["wall_s"], 1),
        "cpu_ms_per_page": round(1000 * (timed["cpu_s"] + db_cpu) / max(items, 1), 3),
        "db_server_cpu_ms_per_page": round(1000 * db_cpu / max(items, 1), 3),
        "sandbox_cpu_ms_per_page": round(1000 * timed["sandbox_cpu_s"] / pages, 3),
        "items": items,
        "complete": items == pages,
    }


# --- the floor -----------------------------------------------------------------------------


def load_floor(env: dict[str, str], manifest: Path) -> None:
    """(Re)create the bare tables and one due task per product page."""
    import hashlib

    urls = product_urls(manifest)
    rows = [(hashlib.sha256(url.encode()).hexdigest(), url) for url in urls]
    url = env["DATABASE_URL"]
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.executescript(SQLITE_FLOOR_SCHEMA)
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO floor_tasks (task_key, state, next_attempt_at, url) "
            "VALUES (?, 'pending', strftime('%Y-%m-%d %H:%M:%f', 'now', '-60 seconds'), ?)",
            rows,
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PG_FLOOR_SCHEMA)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO floor_tasks (task_key, state, next_attempt_at, url) "
                "VALUES (%s, 'pending', now() - interval '1 minute', %s)",
                rows,
            )
        conn.execute("VACUUM ANALYZE floor_tasks")


def run_floor(
    env: dict[str, str], sandbox: Sandbox, spec: Path, *, db: str, workers: int,
    concurrency: int, pages: int, pipelined: bool = False,
) -> dict[str, Any]:  # fmt: skip
    load_floor(env, sandbox.manifest)
    per_worker = max(1, concurrency // workers)
    cmds = [
        [
            PY, str(ROOT / "bench" / "scrape_floor.py"), "--db", env["DATABASE_URL"],
            "--spec", str(spec), "--concurrency", str(per_worker), "--worker", f"floor-{i}",
            *(["--pipelined"] if pipelined else []),
        ]
        for i in range(workers)
    ]  # fmt: skip
    sampler = BackendCpu(env["DATABASE_URL"]) if db == "postgres" else None
    with sampler or contextlib.nullcontext():
        timed = run_timed(cmds, env, sandbox)
    db_cpu = sampler.seconds() if sampler else 0.0
    committed = failed = 0
    for code, out, err in timed["outputs"]:
        if code != 0:
            raise RuntimeError(f"scrape_floor failed ({code}):\n{out}\n{err[-3000:]}")
        line = json.loads(out.strip().splitlines()[-1])
        committed += line["committed"]
        failed += line["failed"]
    return {
        "pages_per_s": round(committed / timed["wall_s"], 1),
        "cpu_ms_per_page": round(1000 * (timed["cpu_s"] + db_cpu) / max(committed, 1), 3),
        "db_server_cpu_ms_per_page": round(1000 * db_cpu / max(committed, 1), 3),
        "sandbox_cpu_ms_per_page": round(1000 * timed["sandbox_cpu_s"] / pages, 3),
        "committed": committed,
        "failed": failed,
        "complete": committed == pages,
    }


# --- Salvage -------------------------------------------------------------------------------


def pg_database_url(pg_name: str) -> str:
    url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("DATABASE_URL") or ""
    if not url.startswith(("postgres://", "postgresql://")):
        url = "postgres://postgres@127.0.0.1:5432/postgres"
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{pg_name}"))


def recreate_pg(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_pg(url: str) -> None:
    """Drop the bench's scratch database (kept with --keep)."""
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with contextlib.suppress(psycopg.Error), psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [PY, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def prepare_db(db: str, workdir: Path, pg_name: str) -> dict[str, str]:
    env = base_env(workdir)
    if db == "postgres":
        env["DATABASE_URL"] = pg_database_url(pg_name)
        recreate_pg(env["DATABASE_URL"])
    else:
        path = workdir / "bench.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        env["DATABASE_URL"] = f"sqlite:///{path}"
    manage(env, "migrate", "--noinput", "-v", "0")
    return env


# CPU of ALL the backends of the bench's database while a side runs (common.DatabaseCpu: listed
# by datname every 50 ms, a backend that appears counted from zero, one that vanishes up to its
# last reading), whoever opened them: a reconnecting worker's new backend included.
BackendCpu = DatabaseCpu


def run_salvage(
    env: dict[str, str],
    sandbox: Sandbox,
    workdir: Path,
    *,
    db: str,
    spec: Path,
    window: str,
    workers: int,
    concurrency: int,
    pages: int,
    root: Path = ROOT,
) -> dict[str, Any]:
    """`root`: the checkout whose worker runs (another one with --baseline-root: a lever's
    before and after, paired in one run; the run is created by this checkout either way)."""
    manage(env, "loaddataset", str(spec))
    run_id = (
        manage(
            env, "createrun", "bench-shop", "--window", window, "--manifest", str(sandbox.manifest)
        )
        .strip()
        .splitlines()[-1]
    )
    per_worker = max(1, concurrency // workers)
    cmd = [
        PY, str(root / "manage.py"), "work", "--until-idle", "--idle-wait", "0",
        "--concurrency", str(per_worker),
    ]  # fmt: skip
    sampler = BackendCpu(env["DATABASE_URL"]) if db == "postgres" else None
    with sampler or contextlib.nullcontext():
        timed = run_timed([cmd] * workers, env, sandbox)
    db_cpu = sampler.seconds() if sampler else 0.0
    for code, out, err in timed["outputs"]:
        if code != 0:
            raise RuntimeError(f"manage.py work failed ({code}):\n{out}\n{err[-3000:]}")
    status = json.loads(manage(env, "runstatus", run_id, "--json"))
    committed = status.get("tasks", {}).get("committed", 0)
    observations = status.get("observations")
    if isinstance(observations, dict):
        observations = observations.get("total", sum(observations.values()))
    return {
        "run": run_id,
        "pages_per_s": round(committed / timed["wall_s"], 1),
        "cpu_ms_per_page": round(1000 * (timed["cpu_s"] + db_cpu) / max(committed, 1), 3),
        "db_server_cpu_ms_per_page": round(1000 * db_cpu / max(committed, 1), 3),
        "sandbox_cpu_ms_per_page": round(1000 * timed["sandbox_cpu_s"] / pages, 3),
        "committed": committed,
        "observations": observations,
        "tasks": status.get("tasks"),
        "complete": committed == pages and observations == pages,
    }


# --- the run -------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("scrapy", "twisted", "django", "httpx", "aiohttp", "httpx-aiohttp", "psycopg"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    with contextlib.suppress(Exception):
        out["postgresql"] = _pg_version()
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    out["cpus"] = str(os.cpu_count())
    out["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return out


def _pg_version() -> str:
    import psycopg

    url = pg_database_url("postgres")
    with psycopg.connect(url, connect_timeout=3) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Environment defaults let `make bench-scrape` be scaled without editing the Makefile.
    parser.add_argument("--pages", type=int, default=int(os.environ.get("BENCH_PAGES", 5000)))
    parser.add_argument("--workers", default="2", help="processes per side, or a list: 1,2")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight, total")
    parser.add_argument(
        "--reps", type=int, default=5, help="repetitions; the sides' order rotates by one each"
    )
    parser.add_argument("--dbs", default="postgres,sqlite")
    parser.add_argument(
        "--pg-name", default=os.environ.get("BENCH_PG_NAME", "salvage_bench_scrape")
    )
    parser.add_argument(
        "--no-scrapy", action="store_true", help="leave Scrapy out (when it is not installed)"
    )
    parser.add_argument(
        "--with-untuned", action="store_true", help="add Scrapy with its default settings"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory and the scratch database"
    )
    parser.add_argument(
        "--baseline-root",
        type=Path,
        help="another checkout whose worker runs as a side `baseline` (this interpreter; that "
        "manage.py's folder is first on sys.path): a lever's before/after, paired",
    )
    parser.add_argument("--no-floor", action="store_true", help="leave the floor out")
    parser.add_argument(
        "--scrapy-pg",
        action="store_true",
        help="Scrapy writes its items to PostgreSQL (batches of 50, executemany upsert into "
        "scrapy_observations) instead of JSON lines, so both sides persist (--dbs postgres)",
    )
    parser.add_argument(
        "--scrapy-sweep",
        action="store_true",
        help="per worker count, first run Scrapy once in each configuration (reactor, "
        "middlewares and extensions off, requests in flight) and take the fastest as the peer",
    )
    parser.add_argument(
        "--pipelined-floor",
        action="store_true",
        help="add the floor pipelined like the engine (PostgreSQL: batch N commits on a second "
        "connection while N+1 is claimed and fetched) as a side `floor_pipelined`",
    )
    args = parser.parse_args()
    dbs = [d.strip() for d in args.dbs.split(",") if d.strip()]
    for db in dbs:
        if db not in ("postgres", "sqlite"):
            parser.error(f"--dbs: {db!r} is not postgres or sqlite")
    try:
        worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        parser.error("--workers: a number or a comma-separated list of numbers")
    if not worker_counts or min(worker_counts) < 1:
        parser.error("--workers: at least 1")
    sides = ["salvage"] + ([] if args.no_floor else ["floor"])
    if not args.no_scrapy:
        sides.insert(1, "scrapy")
        if args.with_untuned:
            sides.append("scrapy_untuned")
    if args.scrapy_pg and dbs != ["postgres"]:
        parser.error("--scrapy-pg: PostgreSQL only (--dbs postgres)")
    if args.pipelined_floor:
        if dbs != ["postgres"]:
            parser.error("--pipelined-floor: PostgreSQL only (--dbs postgres)")
        sides.append("floor_pipelined")
    if args.baseline_root:
        if not (args.baseline_root / "manage.py").is_file():
            parser.error(f"--baseline-root: no manage.py in {args.baseline_root}")
        sides.insert(1, "baseline")
    compile_bytecode(ROOT, *([args.baseline_root] if args.baseline_root else []))

    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the finally blocks stop the sandbox
    # and any measured process.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workdir = Path(tempfile.mkdtemp(prefix="salvage-bench-scrape-"))
    info = versions()
    watch = LoadWatch(own_processes=max(worker_counts) + 1)  # + the sandbox
    log(
        f"bench scrape: {args.pages} pages, workers={args.workers}, "
        f"concurrency={args.concurrency}, reps={args.reps}, dbs={','.join(dbs)}, "
        f"sides={','.join(sides)}; {info}"
    )
    sandbox = Sandbox(args.pages, workdir, args.concurrency)
    summary: dict[str, Any] = {"bench": "scrape", "pages": args.pages, "results": []}
    try:
        urls = product_urls(sandbox.manifest)
        cap = sandbox_capacity(sandbox, urls)
        summary["sandbox"] = cap
        log(f"sandbox at {sandbox.base_url}: {cap}")
        for db, workers in [(db, w) for db in dbs for w in worker_counts]:
            env = prepare_db(db, workdir, args.pg_name)
            spec = spec_for(sandbox, workdir, max(1, args.concurrency // workers))
            pairs = []
            sweep = None
            if args.scrapy_sweep and "scrapy" in sides:
                sweep = sweep_scrapy(
                    sandbox, workdir, args.concurrency, args.pages, workers,
                    env["DATABASE_URL"] if args.scrapy_pg else "",
                )  # fmt: skip
            for rep in range(args.reps):
                pair: dict[str, Any] = {}
                # ABC, BCA, CAB: every side in every position, none always in the middle.
                for side in rotated(tuple(sides), rep):
                    if side in ("salvage", "baseline"):
                        pair[side] = run_salvage(
                            env, sandbox, workdir, db=db, spec=spec,
                            window=f"bench-{db}-w{workers}-{rep}-{side}", workers=workers,
                            concurrency=args.concurrency, pages=args.pages,
                            root=ROOT if side == "salvage" else args.baseline_root,
                        )  # fmt: skip
                    elif side in ("floor", "floor_pipelined"):
                        pair[side] = run_floor(
                            env, sandbox, spec, db=db, workers=workers,
                            concurrency=args.concurrency, pages=args.pages,
                            pipelined=side == "floor_pipelined",
                        )  # fmt: skip
                    else:
                        pair[side] = run_scrapy(
                            sandbox, workdir, args.concurrency, args.pages, workers,
                            tuned=side == "scrapy",
                            pg_url=env["DATABASE_URL"] if args.scrapy_pg else "",
                            extra=sweep["best"] if sweep and side == "scrapy" else (),
                        )  # fmt: skip
                    load = os.getloadavg()[0]
                    log(f"[{db} w{workers} rep {rep}] {side}: {pair[side]} load {load:.2f}")
                pairs.append(pair)
            row = summarise(db, workers, args.concurrency, pairs)
            if sweep:
                row["scrapy_sweep"] = sweep  # the peer's settings and every one tried
            summary["results"].append(row)
    finally:
        sandbox.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            if "postgres" in dbs:
                drop_pg(pg_database_url(args.pg_name))
    for row in summary["results"]:
        log(
            f"{row['db']} x{row['workers']}: Salvage {row['pages_per_s']} p/s "
            f"({row['cpu_ms_per_page']} CPU ms/page); scrapy {row.get('scrapy_pages_per_s')} "
            f"p/s ({row.get('scrapy_cpu_ms_per_page')}), ratio {row.get('ratio_scrapy')}, "
            f"CPU x{row.get('cpu_ratio_scrapy')}; floor {row.get('floor_pages_per_s')} p/s "
            f"({row.get('floor_cpu_ms_per_page')}), ratio {row.get('ratio_floor')}, CPU "
            f"x{row.get('cpu_ratio_floor')}; baseline {row.get('baseline_pages_per_s')} p/s "
            f"({row.get('baseline_cpu_ms_per_page')}), ratio {row.get('ratio_baseline')}, "
            f"CPU x{row.get('cpu_ratio_baseline')}"
        )
    summary["versions"] = info
    summary.update(watch.finish())
    if not all(row["complete"] for row in summary["results"]):
        summary["headline"] = False
        summary["headline_reason"] = "a side did not commit every page"
    refuse_if_spread(
        summary,
        (
            *("ratio_scrapy", "ratio_floor", "cpu_ratio_scrapy", "cpu_ratio_floor"),
            *("ratio_floor_pipelined", "cpu_ratio_floor_pipelined"),
        ),
        lambda r: f"{r['db']} x{r['workers']}",
    )
    summary["command"] = " ".join(["python", "bench/scrape.py", *sys.argv[1:]])
    print(json.dumps(summary), flush=True)
    return 0


def spec_for(sandbox: Sandbox, workdir: Path, per_worker: int) -> Path:
    """The spec the sandbox wrote, with the per-worker concurrency."""
    spec = workdir / f"bench-shop-c{per_worker}.toml"
    text = sandbox.spec.read_text()
    text = re.sub(r"(?m)^concurrency = \d+$", f"concurrency = {per_worker}", text)
    text = re.sub(r"(?m)^per_host = \d+$", f"per_host = {per_worker}", text)
    spec.write_text(text)
    return spec


def summarise(db: str, workers: int, concurrency: int, pairs: list[dict[str, Any]]) -> dict:
    """One row from paired repetitions: medians per side, and Salvage / other per repetition
    (pages/s and CPU per page), median over repetitions."""

    def med(key: str, side: str) -> float | None:
        values = [p[side][key] for p in pairs if side in p]
        return round(statistics.median(values), 3) if values else None

    def ratios(key: str, side: str) -> list[float]:
        return [p["salvage"][key] / p[side][key] for p in pairs if p.get(side, {}).get(key)]

    def paged(name: str, side: str, key: str = "pages_per_s") -> dict[str, float]:
        """A ratio's median, lowest and highest repetition (the spread rule's)."""
        values = ratios(key, side)
        if not values:
            return {name: None}
        low, mid, high = min(values), statistics.median(values), max(values)
        return {name: round(mid, 3), f"{name}_min": round(low, 3), f"{name}_max": round(high, 3)}

    row: dict[str, Any] = {
        "db": db,
        "workers": workers,
        "concurrency": concurrency,
        "pages_per_s": med("pages_per_s", "salvage"),
        "cpu_ms_per_page": med("cpu_ms_per_page", "salvage"),
        "db_server_cpu_ms_per_page": med("db_server_cpu_ms_per_page", "salvage"),
        "sandbox_cpu_ms_per_page": med("sandbox_cpu_ms_per_page", "salvage"),
        "reps": len(pairs),
        "complete": all(side["complete"] for p in pairs for side in p.values()),
    }
    for side in ("floor", "baseline", "floor_pipelined"):
        if any(side in p for p in pairs):
            row[f"{side}_pages_per_s"] = med("pages_per_s", side)
            row[f"{side}_cpu_ms_per_page"] = med("cpu_ms_per_page", side)
            row[f"{side}_db_server_cpu_ms_per_page"] = med("db_server_cpu_ms_per_page", side)
            row.update(paged(f"ratio_{side}", side))
            row.update(paged(f"cpu_ratio_{side}", side, "cpu_ms_per_page"))
    for side in ("scrapy", "scrapy_untuned"):
        if any(side in p for p in pairs):
            suffix = "" if side == "scrapy" else "_untuned"
            row[f"scrapy{suffix}_pages_per_s"] = med("pages_per_s", side)
            row[f"scrapy{suffix}_cpu_ms_per_page"] = med("cpu_ms_per_page", side)
            row[f"scrapy{suffix}_db_server_cpu_ms_per_page"] = med(
                "db_server_cpu_ms_per_page", side
            )
            row.update(paged(f"ratio_scrapy{suffix}", side))
            row.update(paged(f"cpu_ratio_scrapy{suffix}", side, "cpu_ms_per_page"))
    # every repetition's figures per side, in the order they ran
    keep = ("pages_per_s", "cpu_ms_per_page", "db_server_cpu_ms_per_page", "complete")
    row["samples"] = [
        {side: {k: got[k] for k in keep if k in got} for side, got in p.items()} for p in pairs
    ]
    return row


if __name__ == "__main__":
    sys.exit(main())
