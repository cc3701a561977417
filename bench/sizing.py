"""What a deployment needs, measured: the figures behind docs/production.md's sizing table.

    python bench/sizing.py [--pages 20000] [--workers 2] [--save]

One run of the sandbox shop (no faults, the page archive on as by default) on a scratch
PostgreSQL database, collected by `--workers` processes of `manage.py work --until-idle`.
Every 0.2 s: each worker's resident memory (/proc VmRSS) and the number of the database's
connections (pg_stat_activity); all along, the CPU of every backend of the database
(common.DatabaseCpu). Afterwards, the bytes the run added: the database's size and each engine
table's with its indexes and TOAST (pg_total_relation_size), after VACUUM ANALYZE, and the
files written under the artefact directory (the page archive).

Prints one line per figure and, last, one JSON line:
{"bench": "sizing", "pages", "workers", "tasks_per_s", "tasks_per_db_cpu_s",
 "db_cpu_share", "worker_rss_mb_peak", "connections_peak", "connections_per_worker",
 "db_bytes_per_task", "tables": {...}, "artefact_bytes_per_page", ...}.
`tasks_per_db_cpu_s` is tasks committed per second of database CPU (claim, commit,
observations and the rest): what one PostgreSQL core sustains when it does nothing else.
On this 2-core box the workers, PostgreSQL and the sandbox share the cores: the rates are
the box's, the per-task figures carry over.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    DatabaseCpu,
    drop_database,
    scratch_database,
    tree_bytes,
)
from engine_runs import (
    committed,
    engine_env,
    finish_workers,
    manage,
    report,
    shop_sandbox,
    start_workers,
)
from loadwatch import LoadWatch

TABLES = ("recovery_task", "recovery_attempt", "recovery_observation", "recovery_outboxevent")
MB = 1024 * 1024


def log(msg: str) -> None:
    print(msg, flush=True)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Sampler:
    """Peak RSS per worker pid and peak connection count, every `interval` in a thread."""

    def __init__(self, pids: list[int], admin_url: str, datname: str, interval: float = 0.2):
        self.pids, self.admin_url, self.datname, self.interval = pids, admin_url, datname, interval
        self.rss = dict.fromkeys(pids, 0)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self._stop.wait(self.interval):
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.datname,)
                ).fetchone()
                self.connections = max(self.connections, count)
                for pid in self.pids:
                    with contextlib.suppress(OSError):  # exited
                        self.rss[pid] = max(self.rss[pid], rss_bytes(pid))


def sizes(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        database = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        found = {"database": database}
        for table in TABLES:
            query = "SELECT pg_total_relation_size(%s::regclass)"
            found[table] = conn.execute(query, (table,)).fetchone()[0]
        return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--save", action="store_true", help="also write bench/results/")
    args = parser.parse_args()

    watch = LoadWatch(own_processes=args.workers + 2)  # the workers, the sandbox, PostgreSQL
    workdir = Path(tempfile.mkdtemp(prefix="salvage-bench-sizing-"))
    name = f"salvage_bench_sizing_{os.getpid()}"
    url = scratch_database(name)
    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    artefacts = workdir / "var" / "artefacts"
    env = engine_env(workdir, url)
    sandbox, spec, manifest = shop_sandbox(args.pages, workdir)
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "loaddataset", str(spec))
        before = sizes(url)
        run_id = manage(env, "createrun", "bench-shop", "--window", "sizing", "--manifest",
                        str(manifest)).strip().splitlines()[-1]  # fmt: skip
        with DatabaseCpu(url) as db_cpu:
            start = time.perf_counter()
            procs = start_workers(env, args.workers)
            with Sampler([p.pid for p in procs], admin, name) as sampler:
                finish_workers(procs)
            wall = time.perf_counter() - start
        done = committed(env, run_id)
        after = sizes(url)
        archive_bytes, archive_files = tree_bytes(artefacts)
    finally:
        sandbox.stop()
        drop_database(name)

    grown = {key: after[key] - before[key] for key in after}
    per_task = {key: round(value / done) for key, value in grown.items()}
    db_cpu_s = db_cpu.seconds()
    peak_rss = max(sampler.rss.values())
    summary = {
        "bench": "sizing", "pages": args.pages, "workers": args.workers,
        "committed": done, "wall_s": round(wall, 2),
        "tasks_per_s": round(done / wall, 1),
        "db_cpu_s": round(db_cpu_s, 2),
        "tasks_per_db_cpu_s": round(done / db_cpu_s),
        "worker_rss_mb_peak": round(peak_rss / MB, 1),
        "worker_rss_mb": {str(pid): round(rss / MB, 1) for pid, rss in sampler.rss.items()},
        "connections_peak": sampler.connections,
        "connections_per_worker": round(sampler.connections / args.workers, 2),
        "db_bytes_per_task": per_task["database"],
        "tables_bytes_per_task": {t: per_task[t] for t in TABLES},
        "db_gb_per_million_tasks": round(grown["database"] / done * 1e6 / 1024**3, 2),
        "artefact_files": archive_files,
        "artefact_bytes_per_page": round(archive_bytes / done) if done else 0,
        "artefact_gb_per_million_pages": round(archive_bytes / done * 1e6 / 1024**3, 2),
        "complete": done == args.pages,
    }  # fmt: skip
    log(f"{done} tasks in {wall:.1f} s by {args.workers} workers: {summary['tasks_per_s']}/s")
    log(f"database CPU {db_cpu_s:.1f} s: {summary['tasks_per_db_cpu_s']} tasks per CPU second")
    log(f"peak RSS per worker {summary['worker_rss_mb_peak']} MB; peak connections "
        f"{sampler.connections} ({summary['connections_per_worker']} per worker)")  # fmt: skip
    log(f"database +{per_task['database']} bytes per task ({per_task}); "
        f"artefacts {summary['artefact_bytes_per_page']} bytes per page")  # fmt: skip
    summary.update(watch.finish())
    report(summary, "sizing", args.save)
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
