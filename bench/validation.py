"""Validation of a run against one SQL aggregate over the same rules, in one run (issue 15).

    python bench/validation.py [--sizes 100000,1000000] [--reps 2] [--pg-name NAME]
                               [--hot-fillfactor FF]

1. Drops and creates a scratch PostgreSQL database (BENCH_DATABASE_URL or DATABASE_URL names
   the server), migrates it, and generates per size one run of N tasks and N observations over
   20 partitions with INSERT ... SELECT generate_series; 1 observation in 100 has a bad price,
   1 in 200 a currency outside the list, 1 in 300 no title. Then VACUUM ANALYZE.
2. The rules (RULES below): a range and an enum rule, two required fields, a partition rule and
   coverage. Per size and repetition, alternating the order:
   - the floor: one hand-written SQL aggregate (FLOOR_SQL) counting, per partition, the same
     rules' failures over the jsonb payloads, read by psycopg;
   - the product as make_candidate runs it: `validation.evaluate(run)` on observations that are
     all `pending` (every observation judged and marked, every result stored);
   - the product re-evaluating (`evaluate(run, mark=set())`: judged, states already right, as
     an operator's accept does).
   - the write floor: one hand-written UPDATE (FLOOR_UPDATE_SQL) marking every observation
     valid or invalid by the same rules, which the candidate evaluation also has to write.
   - the judging pass alone: `validation_sql.tally` (the one SQL pass that tallies every rule
     kind per partition, no write, no stored result): what any evaluation costs at least while
     it judges every observation in one pass, e.g. one whose states were written at commit.
   The states are reset to `pending` and the table rewritten packed (VACUUM FULL; untimed)
   before each evaluation and write floor.
   With --hot-fillfactor FF (a lever, measured after the sizes above, on the same rows): the
   table is rebuilt with `validation_state` in no index (obs_run_valid_idx replaced by one on
   (run_id, id)) and fillfactor FF (VACUUM FULL), so marking can be a HOT update; the floor
   aggregate and the candidate evaluation are timed again, with the heap size before and after.
3. Prints one line per measurement and, last, one JSON line:
   {"bench": "validation", "results": [{"observations", "floor_s", "evaluate_s", "ratio",
   "floor_update_s", "ratio_vs_update", "reevaluate_s", "ratio_reevaluate", "judge_s",
   "ratio_judge", "reps"}], "hot": [{"observations", "fillfactor", "heap_mb_before",
   "heap_mb_after", "floor_s", "evaluate_s", "ratio", "ratio_vs_default_floor",
   "hot_updates", "updates"}] (with --hot-fillfactor), "loadavg_before", ..., "headline", ...}
   ratio = evaluate_s / floor_s (median over repetitions): the headline, as issue 15 states
   it (target: <= 4 at 1,000,000 observations). ratio_vs_update compares the candidate
   evaluation with the write floor; ratio_reevaluate re-evaluating (judging, storing the
   results, counting states) and ratio_judge the judging pass alone with the aggregate.
   `pattern` rules are left out: on PostgreSQL they are judged in
   Python (docs/spec-format.md, "How the rules are evaluated").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from common import compile_bytecode, drop_database, generate_run, scratch_database
from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARTITIONS = 20
RULES = [
    {"name": "price_range", "kind": "range", "field": "price", "min": 0, "max": 500},
    {"name": "currency_enum", "kind": "enum", "field": "currency", "values": ["EUR", "USD"]},
    {"name": "price_share", "kind": "partition_invalid_share", "field": "price", "max": 0.05},
    {"name": "coverage", "kind": "coverage", "min": 0.9},
]
SPEC = {
    "name": "bench-validation",
    "provider": "noop",
    "scraper_version": "1",
    "entity_key": {"field": "sku"},
    "partition": {"rule": "host"},
    "page_types": {
        "product": {
            "fields": {
                "title": {"selector": "h1", "required": True},
                "sku": {"selector": "[data-sku]", "attr": "data-sku", "required": True},
                "price": {"selector": ".price", "type": "decimal"},
                "currency": {"selector": ".currency"},
            }
        }
    },
    "rules": RULES,
}

# The same rules as one aggregate, written by hand as one would without the product: a price
# fails when it is present and not a number in [0, 500]; a currency when present and not in
# the list; a row is incomplete without title or sku.
FLOOR_SQL = """
SELECT partition, count(*),
  sum(CASE WHEN p IS NOT NULL AND btrim(p) <> ''
           AND (p !~ '^[+-]?[0-9]+[.]?[0-9]*$' OR p::float8 < 0 OR p::float8 > 500)
      THEN 1 ELSE 0 END),
  sum(CASE WHEN c IS NOT NULL AND btrim(c) <> '' AND c NOT IN ('EUR', 'USD')
      THEN 1 ELSE 0 END),
  sum(CASE WHEN coalesce(btrim(t), '') = '' OR coalesce(btrim(s), '') = '' THEN 1 ELSE 0 END)
FROM (SELECT partition, payload ->> 'price' AS p, payload ->> 'currency' AS c,
             payload ->> 'title' AS t, payload ->> 'sku' AS s
      FROM recovery_observation WHERE run_id = %s) o
GROUP BY partition
"""

# The write floor: the same rules as one hand-written UPDATE marking every observation valid or
# invalid (what the candidate evaluation also has to write), on observations all `pending`.
FLOOR_UPDATE_SQL = """
UPDATE recovery_observation SET validation_state = CASE WHEN
  (p IS NOT NULL AND btrim(p) <> ''
   AND (p !~ '^[+-]?[0-9]+[.]?[0-9]*$' OR p::float8 < 0 OR p::float8 > 500))
  OR (c IS NOT NULL AND btrim(c) <> '' AND c NOT IN ('EUR', 'USD'))
  OR coalesce(btrim(t), '') = '' OR coalesce(btrim(s), '') = ''
  THEN 'invalid' ELSE 'valid' END
FROM (SELECT id, payload ->> 'price' AS p, payload ->> 'currency' AS c,
             payload ->> 'title' AS t, payload ->> 'sku' AS s
      FROM recovery_observation WHERE run_id = %s) o
WHERE recovery_observation.id = o.id
"""


# One price in 100 not a number, one currency in 200 not allowed, one title in 300 missing.
PAYLOAD_SQL = """
    jsonb_strip_nulls(jsonb_build_object(
        'title', CASE WHEN t.id % 300 = 0 THEN NULL
                 ELSE 'Product ' || t.id || ' deluxe edition' END,
        'sku', 'SKU-' || t.id,
        'price', CASE WHEN t.id % 100 = 0 THEN 'N/A'
                 ELSE round((t.id % 40000) / 100.0 + 1, 2)::text END,
        'currency', CASE WHEN t.id % 200 = 0 THEN 'GBP' ELSE 'EUR' END,
        'description', repeat('Solid, reliable and well reviewed. ', 8)))
""".replace("%", "%%")


def generate(run_id: int, window: str, n: int) -> None:
    generate_run(run_id, window, n, PARTITIONS, PAYLOAD_SQL, "pending")


def floor(run_id: int) -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FLOOR_SQL, [run_id])
        rows = cursor.fetchall()
    seconds = time.perf_counter() - started
    if len(rows) != PARTITIONS:
        raise SystemExit(f"floor aggregate returned {len(rows)} partitions, not {PARTITIONS}")
    return seconds


def floor_update(run_id: int) -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FLOOR_UPDATE_SQL, [run_id])
    return time.perf_counter() - started


def evaluate(run_id: int, mark) -> float:
    from recovery import validation

    started = time.perf_counter()
    validation.evaluate(run_id, mark=mark)
    return time.perf_counter() - started


def judge(run_id: int) -> float:
    """The one SQL judging pass of an evaluation, alone (validation_sql.tally, as
    validation._evaluate builds it for SPEC's rules)."""
    from django.db import connection

    from recovery import validation, validation_sql

    value_rules = [r for r in RULES if r["kind"] in validation.VALUE_RULE_KINDS]
    watched = {r["field"] for r in RULES if r["kind"] == "partition_invalid_share"}
    verdicts = validation_sql.RowVerdicts(
        connection.vendor, value_rules, validation.required_fields(SPEC), watched
    )
    started = time.perf_counter()
    found = validation_sql.tally(run_id, verdicts)
    seconds = time.perf_counter() - started
    if len(found.tallies) != PARTITIONS or found.undecided:
        raise SystemExit("the judging pass did not decide every observation in SQL")
    return seconds


def heap_mb() -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size('recovery_observation')")
        return round(cursor.fetchone()[0] / 1e6, 1)


def update_counts() -> tuple[int, int]:
    """(rows updated, of which HOT) in recovery_observation since the server started."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = 'recovery_observation'"
        )
        return cursor.fetchone()


def settled_counts(since: tuple[int, int], expected: int) -> tuple[int, int]:
    """update_counts() once they include `expected` more updates than `since` (a backend
    reports its statistics within about a second; a deadline, not a sleep for luck)."""
    deadline = time.monotonic() + 10
    while True:
        now = update_counts()
        if now[0] - since[0] >= expected or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def hot_layout(fillfactor: int) -> None:
    """validation_state in no index and room on every page: marking can be a HOT update."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS obs_run_valid_idx")
        cursor.execute(
            "CREATE INDEX IF NOT EXISTS bench_obs_run_id_idx ON recovery_observation (run_id, id)"
        )
        cursor.execute(f"ALTER TABLE recovery_observation SET (fillfactor = {int(fillfactor)})")
        cursor.execute("VACUUM FULL recovery_observation")
        cursor.execute("ANALYZE recovery_observation")


def measure_hot(runs: dict[int, int], fillfactor: int, reps: int) -> list[dict]:
    """The candidate evaluation again on the HOT-able layout (see the module docstring)."""
    import statistics as st

    for run_id in runs.values():
        reset(run_id)
    before = heap_mb()  # packed, every state `pending`: as the timed evaluations start
    hot_layout(fillfactor)
    after = heap_mb()
    rows = []
    for n, run_id in runs.items():
        floor(run_id)
        floors, evaluations, updated, hot = [], [], 0, 0
        for _rep in range(reps):
            floors.append(floor(run_id))
            counts = settled_counts(update_counts(), 0)
            reset(run_id)
            counts = settled_counts(counts, n)  # the reset's own updates, counted out
            evaluations.append(evaluate(run_id, None))
            now = settled_counts(counts, n)  # every observation was pending: n marked
            updated += now[0] - counts[0]
            hot += now[1] - counts[1]
            floors.append(floor(run_id))
            print(
                f"{n:>9} observations  hot ff={fillfactor:<3} floor {floors[-1]:7.3f} s  "
                f"evaluate {evaluations[-1]:8.3f} s",
                flush=True,
            )
        rows.append(
            {
                "observations": n,
                "fillfactor": fillfactor,
                "heap_mb_before": before,
                "heap_mb_after": after,
                "floor_s": round(st.median(floors), 3),
                "evaluate_s": round(st.median(evaluations), 3),
                "ratio": round(st.median(evaluations) / st.median(floors), 2),
                "updates": updated,
                "hot_updates": hot,
            }
        )
    return rows


def reset(run_id: int) -> None:
    """Every observation back to `pending`, then the table rewritten packed (VACUUM FULL), as
    a run's commits leave it: each timed write starts from the same layout, not from the
    dead rows of the previous repetition."""
    from django.db import connection

    from recovery.models import Observation

    Observation.objects.filter(run_id=run_id).update(validation_state="pending")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM FULL recovery_observation")
        cursor.execute("ANALYZE recovery_observation")


def summarise(n: int, samples: dict[str, list[float]]) -> dict:
    """One size's figures: medians over repetitions, each ratio = the product's seconds / its
    floor's seconds (the same rows in the same run)."""
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "observations": n,
        "floor_s": round(med["floor"], 3),
        "evaluate_s": round(med["evaluate"], 3),
        "ratio": round(med["evaluate"] / med["floor"], 2),
        "floor_update_s": round(med["floor_update"], 3),
        "ratio_vs_update": round(med["evaluate"] / med["floor_update"], 2),
        "reevaluate_s": round(med["reevaluate"], 3),
        "ratio_reevaluate": round(med["reevaluate"] / med["floor"], 2),
        "judge_s": round(med["judge"], 3),
        "ratio_judge": round(med["judge"] / med["floor"], 2),
        "reps": len(samples["evaluate"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--pg-name", default="bench_validation_scratch")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--hot-fillfactor",
        type=int,
        default=0,
        help="then measure the candidate evaluation again with validation_state in no index "
        "and this fillfactor (a lever; 0: not measured)",
    )
    args = parser.parse_args()
    compile_bytecode(ROOT)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    watch = LoadWatch(own_processes=2)  # this process and its database backend

    os.environ["DATABASE_URL"] = scratch_database(args.pg_name)
    os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from recovery import counters, specs
    from recovery.models import Dataset, Run

    print(f"scratch database {args.pg_name}: migrating and generating {sizes}", flush=True)
    call_command("migrate", verbosity=0)
    spec = specs.validate(SPEC)
    dataset = Dataset.objects.create(
        name=spec["name"], spec=spec, spec_sha256=specs.spec_sha256(spec), provider="noop"
    )
    runs = {}
    for n in sizes:
        run = Run.objects.create(dataset=dataset, window=f"w{n}")
        generate(run.pk, run.window, n)
        counters.rebuild(run.pk)
        runs[n] = run.pk
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")

    results = []
    try:
        for n in sizes:
            run_id = runs[n]
            floor(run_id)  # warm the table
            samples = {
                "floor": [], "evaluate": [], "reevaluate": [], "floor_update": [], "judge": []
            }  # fmt: skip
            for rep in range(args.reps):
                order = ["floor", "judge", "floor_update", "evaluate"]
                for which in order if rep % 2 == 0 else reversed(order):
                    if which == "floor":
                        seconds = floor(run_id)
                    elif which == "judge":
                        seconds = judge(run_id)
                    else:
                        reset(run_id)
                        seconds = (
                            floor_update(run_id)
                            if which == "floor_update"
                            else evaluate(run_id, None)
                        )
                    samples[which].append(seconds)
                    print(f"{n:>9} observations  {which:<12} {seconds:8.3f} s", flush=True)
                reset(run_id)
                evaluate(run_id, None)
                seconds = evaluate(run_id, set())
                samples["reevaluate"].append(seconds)
                print(f"{n:>9} observations  reevaluate   {seconds:8.3f} s", flush=True)
            results.append(summarise(n, samples))
        hot = measure_hot(runs, args.hot_fillfactor, args.reps) if args.hot_fillfactor else []
        for row in hot:
            default = next(r for r in results if r["observations"] == row["observations"])
            row["ratio_vs_default_floor"] = round(row["evaluate_s"] / default["floor_s"], 2)
    finally:
        if not args.keep:
            drop_database(args.pg_name)
    summary = {"bench": "validation", "results": results}
    if hot:
        summary["hot"] = hot
    print(json.dumps({**summary, **watch.finish()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
