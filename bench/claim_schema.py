"""What the product's schema costs per task: the schema floor with parts of it taken away.

The schema floor (bench/claim.py: seed 002's claim and commit statements on recovery_task,
recovery_attempt and recovery_observation) runs in two scratch databases at once, one worker
each, steps alternated so the box's load falls on both alike: A has the full schema, B the full
schema minus a *variant* (indexes dropped, or the foreign keys). Each run goes to the end of
`--tasks` tasks (so GIN pending-list merges fall inside it, and the list is cleaned in the
measured backend at the end), autovacuum off on those tables. Reported: B / A of the
PostgreSQL backends' CPU per task, per repetition and the median. PostgreSQL only.

    .venv/bin/python bench/claim_schema.py                       # every variant, 2 reps
    .venv/bin/python bench/claim_schema.py --variant task_run_url_idx --variant fks
    .venv/bin/python bench/claim_schema.py --a-migration 0020_drop_unused_like_indexes
        # A at that recovery migration, B at the newest: a schema change before / after

Variants: an index name (dropped), `fks` (every foreign key of the three tables), `run_fks`
(only their foreign keys to recovery_run),
`task_secondary` (every non-unique recovery_task index but the claim's), `attempt_secondary`,
`observation_secondary`, `none` (A against A: the noise). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

from bare_floor import PG_FLOOR_SCHEMA
from claim import ROOT, PgSchemaFloor, backend_cpu, pg_admin, pg_load, prepare_engine_database
from loadwatch import LoadWatch

TABLES = ("recovery_task", "recovery_attempt", "recovery_observation")
GROUPS = ("none", "fks", "task_secondary", "attempt_secondary", "observation_secondary")


def _rows(url: str, sql: str, params=()) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def secondary_indexes(url: str) -> list[tuple[str, str, str]]:
    """(name, table, definition) of the non-unique indexes of the three tables."""
    return _rows(
        url,
        "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE tablename = ANY(%s) "
        "AND indexdef NOT LIKE 'CREATE UNIQUE%%' ORDER BY tablename, indexname",
        [list(TABLES)],
    )


def foreign_keys(url: str) -> list[tuple[str, str, str]]:
    return _rows(
        url,
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s)",
        [list(TABLES)],
    )


def take_away(url: str, variant: str) -> list[str]:
    """Apply the variant to B; returns the statements that put it back."""
    indexes = secondary_indexes(url)
    if variant == "none":
        return []
    if variant in ("fks", "run_fks"):
        keys = foreign_keys(url)
        if variant == "run_fks":  # only those to recovery_run (denormalised run_id columns)
            keys = [k for k in keys if "REFERENCES recovery_run(" in k[2]]
        for table, name, _definition in keys:
            pg_admin(url, f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        return [f"ALTER TABLE {t} ADD CONSTRAINT {n} {d}" for t, n, d in keys]
    if variant.endswith("_secondary"):
        table = "recovery_" + variant.removesuffix("_secondary")
        chosen = [i for i in indexes if i[1] == table and i[0] != "task_claim_idx"]
    else:
        chosen = [i for i in indexes if i[0] == variant]
        if not chosen:
            raise SystemExit(f"no such secondary index: {variant}")
    for name, _table, _definition in chosen:
        pg_admin(url, f"DROP INDEX {name}")
    return [definition for _name, _table, definition in chosen]


def _clean_gin(conn) -> None:
    """Merge every GIN pending list of the three tables here, so its cost counts."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT x.oid FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = x.relam WHERE a.amname = 'gin' "
            "AND i.indrelid::regclass::text = ANY(%s)",
            [list(TABLES)],
        )
        for (oid,) in cur.fetchall():
            cur.execute("SELECT gin_clean_pending_list(%s)", [oid])


def paired(url_a: str, url_b: str, tasks: int, batch: int) -> tuple[float, float]:
    """Backend CPU ms per task of A and B, their steps alternated until both run dry."""
    pg_load(url_a, tasks)
    pg_load(url_b, tasks)
    a, b = PgSchemaFloor(url_a, "a"), PgSchemaFloor(url_b, "b")
    try:
        a.step(batch)
        b.step(batch)
        cpu_a, cpu_b = backend_cpu(a.backend_pids()), backend_cpu(b.backend_pids())
        done_a = done_b = 0
        while True:
            got_a, got_b = a.step(batch), b.step(batch)
            done_a += max(got_a, 0)
            done_b += max(got_b, 0)
            if got_a < 0 and got_b < 0:
                break
        _clean_gin(a.conn)
        _clean_gin(b.conn)
        ms_a = (backend_cpu(a.backend_pids()) - cpu_a) * 1000 / max(done_a, 1)
        ms_b = (backend_cpu(b.backend_pids()) - cpu_b) * 1000 / max(done_b, 1)
        return ms_a, ms_b
    finally:
        a.conn.close()
        b.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    admin = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--pg-url", default=admin, help="admin connection (scratch databases)")
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks per run (to dry)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--variant", action="append", help="repeatable; default: the groups")
    parser.add_argument("--a-migration", help="migrate A back to this recovery migration")
    args = parser.parse_args()
    variants = args.variant or list(GROUPS)
    watch = LoadWatch(own_processes=1)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="recovery.settings")
    env.update(SALVAGE_INSECURE_DEV_KEY="1", SALVAGE_LOG_LEVEL="WARNING")
    urls = {}
    for side in ("a", "b"):
        name = f"bench_claim_schema_{side}_{os.getpid()}"
        urls[side] = urlunsplit(urlsplit(args.pg_url)._replace(path=f"/{name}"))
        pg_admin(args.pg_url, f"CREATE DATABASE {name}")
    results = {}
    try:
        for side, url in urls.items():
            side_env = dict(env, DATABASE_URL=url)
            prepare_engine_database(url, side_env)
            if side == "a" and args.a_migration:
                back = ["manage.py", "migrate", "recovery", args.a_migration, "-v", "0"]
                subprocess.run([sys.executable, *back], cwd=ROOT, env=side_env, check=True)
            pg_admin(url, PG_FLOOR_SCHEMA)
            for table in TABLES:
                pg_admin(url, f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        for rep in range(args.reps):
            for variant in variants if rep % 2 == 0 else variants[::-1]:
                restore = take_away(urls["b"], variant)
                try:
                    ms_a, ms_b = paired(urls["a"], urls["b"], args.tasks, args.batch)
                finally:
                    for statement in restore:
                        pg_admin(urls["b"], statement)
                results.setdefault(variant, []).append((ms_a, ms_b))
                print(
                    f"rep {rep + 1} {variant}: A {ms_a:.4f}, B {ms_b:.4f} backend CPU ms/task, "
                    f"B/A {ms_b / ms_a if ms_a else 0:.3f}, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        for url in urls.values():
            name = urlsplit(url).path.lstrip("/")
            pg_admin(args.pg_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def ratios(pairs):  # a tiny run may read no CPU tick at all: no ratio then
        return [round(b / a, 3) for a, b in pairs if a > 0]

    summary = [
        {
            "variant": variant,
            "b_over_a": round(statistics.median(ratios(pairs)), 3) if ratios(pairs) else None,
            "per_rep": ratios(pairs),
            "a_db_cpu_ms_per_task": round(statistics.median(a for a, _b in pairs), 4),
            "b_db_cpu_ms_per_task": round(statistics.median(b for _a, b in pairs), 4),
        }
        for variant, pairs in results.items()
    ]
    for row in summary:
        print(f"{row['variant']:32s} B/A {row['b_over_a']} {row['per_rep']}")
    out = {"bench": "claim_schema", "tasks": args.tasks, "a_migration": args.a_migration}
    out.update(results=summary, **watch.finish())
    out["command"] = " ".join(["python", "bench/claim_schema.py", *sys.argv[1:]])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
