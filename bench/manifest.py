"""createrun of a 100,000-line manifest against the raw-SQL floor, on SQLite and PostgreSQL.

For each database the benchmark makes a scratch database (a temporary SQLite file; a
PostgreSQL database it drops and creates, `salvage_bench_manifest` by default), migrates it,
loads examples/shop.toml, and in a child process times:

- `seconds`: `manage.py createrun shop --window bench --manifest FILE` run in-process with
  call_command (read and check every line, canonicalise, hash keys, insert run + tasks +
  counters + audit entry in one transaction, commit). Interpreter start-up is excluded.
- `view_seconds`: the same manifest uploaded through the dashboard's view (an admin's POST to
  /datasets/shop/runs with the Django test client: middleware, multipart parsing, the upload
  spooled to disk, then the same engine function) into window `bench-view`.
- `floor_seconds`: the same rows (every column createrun wrote, values prepared beforehand)
  inserted with the driver's plain `executemany` (sqlite3 / psycopg) into a copy of
  recovery_task with the same indexes and the same run foreign key, then COMMIT.

`ratio` = seconds / floor_seconds: what parsing, checking and Django cost above the bare
insert. The last line of output is one JSON object: {"bench": "manifest", "results": [...],
"loadavg_before", "loadavg_after", "headline", ...} (bench/loadwatch.py).

    make bench-manifest                    # = .venv/bin/python bench/manifest.py
    .venv/bin/python bench/manifest.py --rows 100000 --db sqlite --with-bulk-create
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 15.0
SPEC = ROOT / "examples" / "shop.toml"


def write_manifest(path: Path, rows: int) -> None:
    """A CSV manifest of distinct product URLs over 50 hosts, spelled the way exports are
    (tracking parameters, unsorted queries), so canonicalisation has real work to do."""
    with path.open("w") as f:
        f.write("url,page_type,priority\n")
        for i in range(rows):
            f.write(
                f"https://Shop{i % 50}.example.com/product/{i}?ref={i % 7}&colour=red"
                f"&utm_source=bench,product,{i % 3}\n"
            )


# --- child: runs inside one database's Django settings ------------------------------------


def child(manifest: str, rows: int, with_bulk_create: bool) -> dict:
    import django

    # Run as a script, this directory leads sys.path, and bench/dashboard.py would shadow the
    # dashboard app the upload view lives in.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from recovery import counters, keys
    from recovery.intake import manifests, specs
    from recovery.models import Run, Task

    call_command("migrate", verbosity=0)
    specs.load_dataset(SPEC)

    load = os.getloadavg()[0]
    started, cpu = time.perf_counter(), time.process_time()
    out = io.StringIO()
    call_command("createrun", "shop", "--window", "bench", "--manifest", manifest, stdout=out)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    run = Run.objects.get(pk=int(out.getvalue().splitlines()[-1]))
    assert Task.objects.filter(run=run).count() == rows == run.task_total
    assert counters.by_state(run.pk) == {"pending": rows}
    view_seconds, view_cpu_seconds = through_the_view(manifest, rows)

    # The floor's rows: exactly what createrun wrote, prepared before the clock starts.
    dataset = run.dataset
    parsed = manifests.parse(manifest, dataset_name="shop", spec=dataset.spec, window="bench")
    insert = manifests._TaskInsert(run.pk, run.manifest_frozen_at)
    floor_rows = []
    for e in parsed.entries:
        row = (e.task_key, e.url, e.page_type, e.partition, e.priority)
        floor_rows.append(tuple(row[v] if k == "row" else v for k, v in insert.slots))
    columns = ", ".join(f'"{c}"' for c in insert.columns)
    result = {
        "db": connection.vendor,
        "rows": rows,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "view_seconds": round(view_seconds, 3),
        "view_cpu_seconds": round(view_cpu_seconds, 3),
    }

    if connection.vendor == "sqlite":
        floor = sqlite_floor(connection.settings_dict["NAME"], columns, floor_rows)
    else:
        floor = pg_floor(connection.settings_dict, columns, floor_rows)
    floor_seconds, floor_cpu = floor
    result["floor_seconds"] = round(floor_seconds, 3)
    result["floor_cpu_seconds"] = round(floor_cpu, 3)
    result["ratio"] = round(seconds / floor_seconds, 2)
    result["cpu_ratio"] = round(cpu_seconds / floor_cpu, 2) if floor_cpu else None

    if with_bulk_create:
        # Reference only: Django's bulk_create for the same rows (why createrun does not use it).
        other = Run.objects.create(dataset=dataset, window="bulk")  # keys differ by window
        objs = [
            Task(
                run_id=other.pk,
                task_key=keys.task_key_from_canonical("shop", e.url, "bulk", e.page_type),
                url=e.url,
                page_type=e.page_type,
                partition=e.partition,
                priority=e.priority,
            )
            for e in parsed.entries
        ]
        started = time.perf_counter()
        with transaction.atomic():
            Task.objects.bulk_create(objs, batch_size=1000)
        result["bulk_create_seconds"] = round(time.perf_counter() - started, 3)
    result["target_seconds"] = TARGET_SECONDS
    # The box is shared: a load average far above the core count stretches wall-clock time.
    result["load_average"] = round(load, 1)
    result["cpus"] = os.cpu_count()
    result["ok"] = seconds < TARGET_SECONDS and view_seconds < TARGET_SECONDS
    return result


def through_the_view(manifest: str, rows: int) -> tuple[float, float]:
    """The same manifest uploaded by an admin on the dashboard (POST /datasets/shop/runs):
    the whole Django stack, multipart parsing and the spooled upload included."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from recovery.models import Run, Task

    admin = User.objects.create_user("bench-admin")
    admin.groups.add(Group.objects.get(name="admin"))
    client = Client(HTTP_HOST="localhost")
    client.force_login(admin)
    with open(manifest, "rb") as upload:
        started, cpu = time.perf_counter(), time.process_time()
        response = client.post(
            "/datasets/shop/runs", {"window": "bench-view", "manifest": upload}, secure=True
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    assert response.status_code == 302, (response.status_code, response.get("Location"))
    run = Run.objects.get(window="bench-view")
    assert Task.objects.filter(run=run).count() == rows == run.task_total
    return seconds, cpu_seconds


def sqlite_floor(path: str, columns: str, rows: list[tuple]) -> tuple[float, float]:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    # The product's own pragmas (recovery.settings), so durability costs the same.
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    ddl = [
        sql
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'recovery_task' AND sql IS NOT NULL"
        )
    ]
    conn.execute("BEGIN")
    for sql in ddl:
        # Quoted (Django's DDL) or not (an index a migration writes in raw SQL).
        sql = re.sub(r'\bON "?recovery_task"?', 'ON "floor_task"', sql)
        sql = sql.replace('"recovery_task"', '"floor_task"')
        sql = re.sub(r'INDEX "?(\w+)"?', r'INDEX "floor_\1"', sql)
        conn.execute(sql)
    conn.execute("COMMIT")
    marks = ", ".join(["?"] * len(rows[0]))
    started, cpu = time.perf_counter(), time.process_time()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(f"INSERT INTO floor_task ({columns}) VALUES ({marks})", rows)
    conn.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    (n,) = conn.execute("SELECT count(*) FROM floor_task").fetchone()
    assert n == len(rows)
    conn.close()
    return elapsed, cpu


def pg_floor(settings_dict: dict, columns: str, rows: list[tuple]) -> tuple[float, float]:
    import psycopg

    conn = psycopg.connect(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"] or None,
        password=settings_dict["PASSWORD"] or None,
        host=settings_dict["HOST"] or None,
        port=settings_dict["PORT"] or None,
        options="-c synchronous_commit=on",
    )
    with conn.cursor() as cur:
        # Same columns, defaults, unique and partial indexes; LIKE does not copy foreign
        # keys, so the run key is added back as Django declares it (deferred).
        cur.execute("CREATE TABLE floor_task (LIKE recovery_task INCLUDING ALL)")
        cur.execute(
            "ALTER TABLE floor_task ADD FOREIGN KEY (run_id) REFERENCES recovery_run (id) "
            "DEFERRABLE INITIALLY DEFERRED"
        )
    conn.commit()
    marks = ", ".join(["%s"] * len(rows[0]))
    started, cpu = time.perf_counter(), time.process_time()
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO floor_task ({columns}) VALUES ({marks})", rows)
    conn.commit()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM floor_task")
        assert cur.fetchone()[0] == len(rows)
    conn.close()
    return elapsed, cpu


# --- parent: scratch databases and child processes ----------------------------------------


def run_child(database_url: str, data_dir: Path, manifest: Path, args) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "recovery.settings",
        "SALVAGE_INSECURE_DEV_KEY": "1",
        "SALVAGE_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, __file__, "--child", str(manifest), "--rows", str(args.rows)]
    if args.with_bulk_create:
        cmd.append("--with-bulk-create")
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pg_admin(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        for sql in statements:
            conn.execute(sql)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--db", choices=["all", "sqlite", "postgresql"], default="all")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_DATABASE_URL")
        or (
            os.environ.get("DATABASE_URL", "")
            if "postgres" in os.environ.get("DATABASE_URL", "")
            else ""
        )
        or "postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server URL (the benchmark makes its own database on it)",
    )
    parser.add_argument("--pg-name", default="salvage_bench_manifest")
    parser.add_argument("--with-bulk-create", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(child(args.child, args.rows, args.with_bulk_create)))
        return 0

    results: list[dict] = []
    failed = False
    watch = LoadWatch(own_processes=1)
    tmp = Path(tempfile.mkdtemp(prefix="salvage-bench-manifest-"))
    try:
        manifest = tmp / "manifest.csv"
        write_manifest(manifest, args.rows)
        if args.db in ("all", "sqlite"):
            db = tmp / "bench.sqlite3"
            results.append(run_child(f"sqlite:///{db}", tmp / "var", manifest, args))
            print(json.dumps(results[-1]), file=sys.stderr)
        if args.db in ("all", "postgresql"):
            name = args.pg_name
            try:
                pg_admin(
                    args.pg_url, f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"'
                )
            except Exception as exc:  # unreachable server: say so in the figures, fail the run
                results.append({"db": "postgresql", "error": f"{type(exc).__name__}: {exc}"})
                failed = True
            else:
                try:
                    url = with_database(args.pg_url, name)
                    results.append(run_child(url, tmp / "var-pg", manifest, args))
                    print(json.dumps(results[-1]), file=sys.stderr)
                finally:
                    with contextlib.suppress(Exception):
                        pg_admin(args.pg_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {"bench": "manifest", "results": results, **watch.finish()}
    summary["command"] = " ".join(["python", "bench/manifest.py", *sys.argv[1:]])
    print(json.dumps(summary), flush=True)
    return 1 if failed or not all(r.get("ok") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
