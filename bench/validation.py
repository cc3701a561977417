"""Validation of a run against one SQL aggregate over the same rules, in one run (issue 15).

    python bench/validation.py [--sizes 100000,1000000] [--reps 2] [--pg-name NAME]

1. Drops and creates a scratch PostgreSQL database (BENCH_DATABASE_URL or DATABASE_URL names
   the server), migrates it, and generates per size one run of N tasks and N observations over
   20 partitions with INSERT ... SELECT generate_series; 1 observation in 100 has a bad price,
   1 in 200 a currency outside the list, 1 in 300 no title. Each observation then gets the
   verdict its commit would have stored (recovery.verdicts: bits, rules digest, valid or
   invalid; written here by the SQL judging pass, which the property tests hold equal to the
   commit's Python), and the table is rewritten packed (VACUUM FULL), as commits leave it.
2. The rules (RULES below): a range and an enum rule, two required fields, a partition rule and
   coverage. Per size and repetition, alternating the order:
   - the floor: one hand-written SQL aggregate (FLOOR_SQL) counting, per partition, the same
     rules' failures over the jsonb payloads, read by psycopg;
   - the product as make_candidate runs it: `validation.evaluate(run)`, every partition's
     hold decided, every result stored, from the verdicts stored at commit (the partitions'
     fingerprints are cleared before, untimed, so each repetition is a first evaluation);
   - the product re-evaluating (`evaluate(run, mark=set())`, as an operator's accept does);
   - the evaluation after the rules changed (`rejudge`): every verdict stale, so every
     observation is judged again and its verdict written (the verdicts are cleared and the
     table packed before, untimed), with its write floor: one hand-written UPDATE
     (FLOOR_UPDATE_SQL) marking every observation valid or invalid by the same rules;
   - the judging pass alone: `validation_sql.tally` over every row (no write).
   And once per size: the commit's share, `commit_judge_us`: Rules.verdict (the Python a
   worker runs per observation at commit) over up to 20,000 of the payloads, microseconds per
   observation; `commit_judge_s` is that times N: the judging moved from the evaluation to
   the commits, paid by the workers page by page (bench/scrape.py's figures include it).
3. Prints one line per measurement and, last, one JSON line:
   {"bench": "validation", "results": [{"observations", "floor_s", "evaluate_s", "ratio",
   "reevaluate_s", "ratio_reevaluate", "rejudge_s", "ratio_rejudge", "floor_update_s",
   "ratio_rejudge_vs_update", "judge_s", "ratio_judge", "commit_judge_us", "commit_judge_s",
   "ratio_commit_judge", "reps"}], "loadavg_before", ..., "headline", ...}
   ratio = evaluate_s / floor_s (median over repetitions): the headline, as issue 15 states
   it (target: <= 4 at 1,000,000 observations, evaluated once from candidate to accepted).
   `pattern` rules are left out: on PostgreSQL they are judged in Python
   (docs/spec-format.md, "How the rules are evaluated").
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
    from recovery.quality import validation

    started = time.perf_counter()
    validation.evaluate(run_id, mark=mark)
    return time.perf_counter() - started


def row_verdicts(vendor: str):
    """The SQL judging of SPEC's rules, as validation._evaluate builds it."""
    from recovery.quality import validation_sql
    from recovery.verdicts import Rules

    rules = Rules.of(SPEC)
    return validation_sql.RowVerdicts(
        vendor, list(rules.value_rules), dict(rules.required), rules.watched
    )


def judge(run_id: int) -> float:
    """The one SQL judging pass of an evaluation, alone (validation_sql.tally, as
    validation._evaluate builds it for SPEC's rules)."""
    from django.db import connection

    from recovery.quality import validation_sql

    verdicts = row_verdicts(connection.vendor)
    started = time.perf_counter()
    found = validation_sql.tally(run_id, verdicts)
    seconds = time.perf_counter() - started
    if len(found.tallies) != PARTITIONS or found.undecided:
        raise SystemExit("the judging pass did not decide every observation in SQL")
    return seconds


def commit_verdicts(run_id: int) -> None:
    """Every observation's verdict as its commit would have stored it (bits, digest, state),
    then the table rewritten packed (VACUUM FULL), as a run's commits leave it."""
    from django.db import connection

    from recovery.models import Observation
    from recovery.quality import validation_sql
    from recovery.verdicts import Rules

    Observation.objects.filter(run_id=run_id).update(verdict=None, verdict_rules="")
    digest = Rules.of(SPEC).digest
    states = {"valid": "valid", "invalid": "invalid"}
    validation_sql.mark(run_id, row_verdicts(connection.vendor), None, digest, states)
    pack()
    if Observation.objects.filter(run_id=run_id).exclude(verdict_rules=digest).exists():
        raise SystemExit("an observation was left without its commit's verdict")


def commit_judge_us(run_id: int, limit: int = 20_000) -> float:
    """Microseconds per observation of Rules.verdict, the Python a worker runs at commit."""
    from recovery.models import Observation
    from recovery.verdicts import Rules

    rules = Rules.of(SPEC)
    payloads = list(
        Observation.objects.filter(run_id=run_id).values_list("payload", flat=True)[:limit]
    )
    started = time.perf_counter()
    for payload in payloads:
        rules.state(rules.verdict(payload, "product"))
    return (time.perf_counter() - started) / len(payloads) * 1e6


def clear_fingerprints(run_id: int) -> None:
    """No partition's hold decided yet: the next evaluation is a run's first."""
    from recovery.models import RunPartition

    RunPartition.objects.filter(run_id=run_id).update(marked_rows=None, marked_sum=None)


def pack() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM FULL recovery_observation")
        cursor.execute("ANALYZE recovery_observation")


def reset(run_id: int) -> None:
    """Every verdict cleared (judged by no rules), then the table rewritten packed: each
    re-judging starts from the same layout, not from the previous one's dead rows."""
    from recovery.models import Observation

    Observation.objects.filter(run_id=run_id).update(
        validation_state="pending", verdict=None, verdict_rules=""
    )
    pack()


def summarise(n: int, samples: dict[str, list[float]], judge_us: float) -> dict:
    """One size's figures: medians over repetitions, each ratio = the product's seconds / its
    floor's seconds (the same rows in the same run)."""
    med = {k: statistics.median(v) for k, v in samples.items()}
    commit_judge_s = judge_us * n / 1e6
    return {
        "observations": n,
        "floor_s": round(med["floor"], 3),
        "evaluate_s": round(med["evaluate"], 3),
        "ratio": round(med["evaluate"] / med["floor"], 2),
        "reevaluate_s": round(med["reevaluate"], 3),
        "ratio_reevaluate": round(med["reevaluate"] / med["floor"], 2),
        "rejudge_s": round(med["rejudge"], 3),
        "ratio_rejudge": round(med["rejudge"] / med["floor"], 2),
        "floor_update_s": round(med["floor_update"], 3),
        "ratio_rejudge_vs_update": round(med["rejudge"] / med["floor_update"], 2),
        "judge_s": round(med["judge"], 3),
        "ratio_judge": round(med["judge"] / med["floor"], 2),
        "commit_judge_us": round(judge_us, 2),
        "commit_judge_s": round(commit_judge_s, 3),
        "ratio_commit_judge": round(commit_judge_s / med["floor"], 2),
        "reps": len(samples["evaluate"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--pg-name", default="bench_validation_scratch")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
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

    from recovery import counters
    from recovery.intake import specs
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
            commit_verdicts(run_id)
            floor(run_id)  # warm the table
            samples = {
                "floor": [], "evaluate": [], "reevaluate": [], "rejudge": [],
                "floor_update": [], "judge": [],
            }  # fmt: skip
            for rep in range(args.reps):
                order = ["floor", "judge", "evaluate", "reevaluate", "floor_update", "rejudge"]
                for which in order if rep % 2 == 0 else reversed(order):
                    if which == "floor":
                        seconds = floor(run_id)
                    elif which == "judge":
                        seconds = judge(run_id)
                    elif which == "evaluate":
                        clear_fingerprints(run_id)
                        seconds = evaluate(run_id, None)
                    elif which == "reevaluate":
                        evaluate(run_id, None)  # (untimed) the candidate's evaluation
                        seconds = evaluate(run_id, set())
                    else:
                        reset(run_id)
                        seconds = (
                            floor_update(run_id)
                            if which == "floor_update"
                            else evaluate(run_id, None)
                        )
                        commit_verdicts(run_id)  # (untimed) back to the commits' verdicts
                    samples[which].append(seconds)
                    print(f"{n:>9} observations  {which:<12} {seconds:8.3f} s", flush=True)
            judge_us = commit_judge_us(run_id)
            print(f"{n:>9} observations  commit judging {judge_us:6.2f} us per row", flush=True)
            results.append(summarise(n, samples, judge_us))
    finally:
        if not args.keep:
            drop_database(args.pg_name)
    summary = {"bench": "validation", "results": results}
    print(json.dumps({**summary, **watch.finish()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
