"""Validation of a run against one SQL aggregate over the same rules, in one run (issue 15).

    python bench/validation.py [--sizes 100000,1000000] [--reps 2] [--pg-name NAME]

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
   The states are reset to `pending` (untimed) before each evaluation and write floor.
3. Prints one line per measurement and, last, one JSON line:
   {"bench": "validation", "results": [{"observations", "floor_s", "evaluate_s", "ratio",
   "floor_update_s", "ratio_vs_update", "reevaluate_s", "ratio_reevaluate", "reps"}],
   "loadavg_before", ..., "headline", ...}
   ratio = evaluate_s / floor_s (median over repetitions): the headline, as issue 15 states
   it (target: <= 4 at 1,000,000 observations). ratio_vs_update compares the candidate
   evaluation with the write floor; ratio_reevaluate the judging alone with the aggregate.
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

from common import drop_database, generate_run, scratch_database
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


def reset(run_id: int) -> None:
    from recovery.models import Observation

    Observation.objects.filter(run_id=run_id).update(validation_state="pending")


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
        "reps": len(samples["evaluate"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--pg-name", default="bench_validation_scratch")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
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
            samples = {"floor": [], "evaluate": [], "reevaluate": [], "floor_update": []}
            for rep in range(args.reps):
                order = ["floor", "floor_update", "evaluate"]
                for which in order if rep % 2 == 0 else reversed(order):
                    if which == "floor":
                        seconds = floor(run_id)
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
    finally:
        if not args.keep:
            drop_database(args.pg_name)
    print(json.dumps({"bench": "validation", "results": results, **watch.finish()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
