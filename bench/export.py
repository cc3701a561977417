"""Export throughput and peak memory against PostgreSQL's own COPY, in one run.

    python bench/export.py [--sizes 100000,1000000] [--reps 2] [--formats csv,jsonl,parquet]
                           [--pg-name NAME] [--keep|--reuse] [--baseline-root CHECKOUT] [--save]

1. Drops and creates a scratch database (BENCH_DATABASE_URL or DATABASE_URL names the server;
   default postgres://postgres@127.0.0.1:5432/postgres), migrates it, and generates one
   accepted run per size with INSERT ... SELECT generate_series: N tasks and N valid
   observations whose jsonb payloads are about 520 bytes in text form (the size used in
   research/perf-baselines.md, section 5), over 20 partitions. Then VACUUM ANALYZE.
2. Per size and repetition, alternating the order: the floor,
   `psql -X -c "COPY (SELECT payload FROM recovery_observation WHERE run_id = R AND
   validation_state = 'valid') TO STDOUT"`, and the product, `manage.py export R --format F`
   for F in --formats (csv, jsonl and parquet by default). Each is a whole process timed start
   to exit (start-up included on both sides), its standard output read and counted by this
   script, and its own peak RSS taken from os.wait4's rusage. Every size gets one unmeasured
   COPY first, so the table is warm. Parquet goes to the same pipe as the others (the command
   writes it to a binary standard output); this script keeps its bytes and, after the timing,
   reads the row count from the file's footer with pyarrow, and fails unless it is N: a
   Parquet file's rows are not lines, and its bytes (compressed, typed columns) are far fewer
   than COPY's, so rows/s is the only fair comparison.
3. Prints one line per measurement and, last, one JSON line:
   {"bench": "export", "results": [{"rows", "format", "rows_per_s", "copy_rows_per_s",
   "ratio", "mb_per_s", "copy_mb_per_s", "mb_ratio", "peak_rss_mb", "rss_growth", ...}],
   "loadavg_before", "loadavg_after", "headline", ...}
   ratio = the export's rows/s / COPY's rows/s of the same repetition (the same rows, so it
   is COPY's seconds / the export's seconds), median over repetitions: the headline. Bytes
   are a second figure only (mb_ratio), since the export writes more bytes per row than COPY
   (provenance columns). ratio_excl_startup subtracts the command's start-up (the median time
   of exporting an empty accepted run). rss_growth = peak RSS at the largest size / at the
   smallest (flat memory: about 1). Targets: ratio >= 0.5 at 1,000,000 rows, memory flat.
4. --baseline-root CHECKOUT (e.g. a `git archive main` extracted elsewhere) also runs that
   checkout's `manage.py export` in every repetition, in turn with ours (the order swapped
   every repetition) and paired with the same COPY: its rows get "code": "baseline", and ours
   get "vs_baseline" = the baseline's seconds / ours (median over repetitions; > 1 means
   faster than the baseline). A lever's before and after, in one run on the same data.
5. --save also writes the JSON line to bench/results/export-<UTC stamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from common import (
    compile_bytecode,
    drop_database,
    generate_run,
    refuse_if_spread,
    scratch_database,
    server_url,
)
from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

PARTITIONS = 20
FORMATS = ("csv", "jsonl", "parquet")

SPEC = {
    "name": "bench-export",
    "provider": "noop",
    "scraper_version": "1",
    "entity_key": {"field": "sku"},
    "partition": {"rule": "host"},
    "page_types": {
        "product": {
            "fields": {
                "title": {"selector": "h1", "required": True},
                "price": {"selector": ".price", "type": "decimal"},
                "sku": {"selector": "[data-sku]", "attr": "data-sku"},
                "brand": {"selector": ".brand"},
                "in_stock": {"selector": ".stock", "type": "bool"},
                "reviews": {"selector": ".reviews", "type": "int"},
                "description": {"selector": ".description"},
            }
        }
    },
    "rules": [],
}


# ~520 bytes of jsonb text per payload, with one formula-looking title in 50 so the CSV
# neutralisation path is exercised.
PAYLOAD_SQL = """
    jsonb_build_object(
        'title', CASE WHEN t.id % 50 = 0 THEN '=HYPERLINK("x")'
                 ELSE 'Product ' || t.id || ' deluxe edition' END,
        'price', ((t.id % 9000) / 100.0 + 1)::text,
        'sku', 'SKU-' || t.id,
        'brand', 'Brand ' || (t.id % 97),
        'in_stock', t.id % 3 <> 0,
        'reviews', t.id % 500,
        'description', repeat('Solid, reliable and well reviewed. ', 11))
""".replace("%", "%%")


def generate(run_id: int, window: str, n: int) -> None:
    """n tasks and n valid observations of one run, in SQL."""
    generate_run(run_id, window, n, PARTITIONS, PAYLOAD_SQL, "valid")


def pair(got: dict, copy: dict) -> dict:
    """One export measurement with the COPY of the same rows in the same repetition:
    ratio = rows/s over rows/s (the same rows, so COPY's seconds / the export's); MB/s of
    each side's own output and their ratio as the second figure."""
    mbs = got["bytes"] / 1e6 / got["seconds"]
    copy_mbs = copy["bytes"] / 1e6 / copy["seconds"]
    return {
        **got,
        "ratio": copy["seconds"] / got["seconds"],
        "mb_per_s": mbs,
        "copy_mb_per_s": copy_mbs,
        "mb_ratio": mbs / copy_mbs,
        "copy_seconds": copy["seconds"],
        "copy_bytes": copy["bytes"],
    }


def summarise(
    samples: dict[tuple[int, str], list[dict]],
    startup: float,
    baseline: dict[tuple[int, str], list[dict]] | None = None,
) -> list[dict]:
    """One row per (rows, format) from paired measurements, medians over repetitions, and
    rss_growth per format = peak RSS at the largest size / at the smallest."""
    med = statistics.median
    results = []
    for (n, fmt), got in sorted(samples.items()):
        # The same ratio without the command's start-up (psql's is ~0.06 s, left in); only
        # where the start-up is well below the export's time (a loaded box can stretch the
        # start-up past it, and the difference would be noise).
        streamed = [
            g["copy_seconds"] / (g["seconds"] - startup)
            for g in got
            if g["seconds"] - startup > 0.2 * g["seconds"]
        ]
        results.append(
            {
                "rows": n,
                "format": fmt,
                "rows_per_s": round(n / med(g["seconds"] for g in got)),
                "copy_rows_per_s": round(n / med(g["copy_seconds"] for g in got)),
                "ratio": round(med(g["ratio"] for g in got), 3),
                "ratio_min": round(min(g["ratio"] for g in got), 3),
                "ratio_max": round(max(g["ratio"] for g in got), 3),
                "ratio_excl_startup": round(med(streamed), 3) if streamed else None,
                "startup_s": round(startup, 2),
                "mb_per_s": round(med(g["mb_per_s"] for g in got), 1),
                "copy_mb_per_s": round(med(g["copy_mb_per_s"] for g in got), 1),
                "mb_ratio": round(med(g["mb_ratio"] for g in got), 3),
                "bytes_per_row": round(got[0]["bytes"] / n, 1) if n else None,
                "copy_bytes_per_row": round(got[0]["copy_bytes"] / n, 1) if n else None,
                "peak_rss_mb": round(max(g["peak_rss_mb"] for g in got), 1),
                "reps": len(got),
            }
        )
        if baseline and (n, fmt) in baseline:
            paired = zip(baseline[(n, fmt)], got, strict=True)
            results[-1]["vs_baseline"] = round(
                med(b["seconds"] / g["seconds"] for b, g in paired), 3
            )
    for fmt in {r["format"] for r in results}:
        rss = {r["rows"]: r["peak_rss_mb"] for r in results if r["format"] == fmt}
        growth = round(rss[max(rss)] / rss[min(rss)], 3)
        for r in results:
            if r["format"] == fmt:
                r["rss_growth"] = growth
    return results


# A small launcher process starts the measured command and reports that command's own rusage:
# a child forked straight from this (large) process would count our pages in its peak RSS.
_LAUNCHER = """
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_pid, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"maxrss_kb": usage.ru_maxrss, "cpu_s": usage.ru_utime + usage.ru_stime,
               "exit": os.waitstatus_to_exitcode(status)}, out)
"""


def measure(argv: list[str], env: dict[str, str], report: Path, keep: bool = False) -> dict:
    """Run a process, count its stdout bytes, return seconds, bytes and its own peak RSS;
    with `keep`, also its output ("output": bytes, for a Parquet file's footer)."""
    kept: list[bytes] = []
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(report), *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
    )
    size = 0
    read = proc.stdout.read
    while True:
        block = read(1 << 20)
        if not block:
            break
        size += len(block)
        if keep:
            kept.append(block)
    proc.stdout.close()
    proc.wait()
    seconds = time.perf_counter() - started
    usage = json.loads(report.read_text())
    if proc.returncode != 0 or usage["exit"] != 0:
        raise SystemExit(f"{argv[:4]} exited with {usage['exit']}")
    return {
        "seconds": seconds,
        "bytes": size,
        "peak_rss_mb": usage["maxrss_kb"] / 1024,  # Linux reports kilobytes
        "cpu_s": usage["cpu_s"],
        **({"output": b"".join(kept)} if keep else {}),
    }


def parquet_rows(data: bytes) -> int:
    """The row count a Parquet file's footer declares."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_metadata(pa.BufferReader(data)).num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--formats", default=",".join(FORMATS), help="of csv, jsonl, parquet")
    parser.add_argument("--pg-name", default="bench_export_scratch")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--save", action="store_true", help="also write bench/results/")
    parser.add_argument(
        "--baseline-root",
        type=Path,
        help="another checkout whose manage.py export is measured too, paired (section 4)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="reuse a scratch database kept (--keep) by an earlier run with the same sizes",
    )
    args = parser.parse_args()
    compile_bytecode(ROOT, *([args.baseline_root] if args.baseline_root else []))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    if not formats or set(formats) - set(FORMATS):
        parser.error(f"--formats: choose from {', '.join(FORMATS)}")
    watch = LoadWatch(own_processes=2)  # the export (or psql) and its database backend

    if args.reuse:
        url = urlunsplit(urlsplit(server_url())._replace(path=f"/{args.pg_name}"))
    else:
        url = scratch_database(args.pg_name)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from recovery import counters
    from recovery.intake import specs
    from recovery.models import Dataset, Run

    runs: dict[int, int] = {}
    if args.reuse:
        for n in sizes:
            run = Run.objects.filter(dataset__name=SPEC["name"], window=f"w{n}").first()
            if run is None or run.observations.count() != n:
                raise SystemExit(f"--reuse: {args.pg_name} has no run of {n} observations")
            runs[n] = run.pk
        print(f"reusing scratch database {args.pg_name}", flush=True)
    else:
        print(f"scratch database {args.pg_name}: migrating and generating {sizes}", flush=True)
        call_command("migrate", verbosity=0)
        spec = specs.validate(SPEC)
        dataset = Dataset.objects.create(
            name=spec["name"], spec=spec, spec_sha256=specs.spec_sha256(spec), provider="noop"
        )
        for n in sizes:
            t0 = time.perf_counter()
            run = Run.objects.create(
                dataset=dataset,
                window=f"w{n}",
                acceptance_state="accepted",
                accepted_at=timezone.now(),
                accepted_by="bench",
            )
            generate(run.pk, run.window, n)
            counters.rebuild(run.pk)
            runs[n] = run.pk
            print(f"  {n:>9,} rows generated in {time.perf_counter() - t0:.1f} s", flush=True)
    # An accepted run with no rows: its export time is the command's start-up (Python, Django).
    empty, _ = Run.objects.get_or_create(
        dataset=Dataset.objects.get(name=SPEC["name"]),
        window="w0",
        defaults={"acceptance_state": "accepted", "accepted_by": "bench"},
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE recovery_observation")
        cursor.execute("VACUUM ANALYZE recovery_task")
    connection.close()

    parts = urlsplit(url)
    psql_env = dict(os.environ)
    psql_env.update(
        PGHOST=parts.hostname or "127.0.0.1",
        PGPORT=str(parts.port or 5432),
        PGUSER=parts.username or "postgres",
        PGDATABASE=args.pg_name,
    )
    if parts.password:
        psql_env["PGPASSWORD"] = parts.password
    child_env = dict(os.environ, DATABASE_URL=url, SALVAGE_INSECURE_DEV_KEY="1")
    child_env.pop("DJANGO_SETTINGS_MODULE", None)

    def copy_argv(run_id: int) -> list[str]:
        sql = (
            "COPY (SELECT payload FROM recovery_observation WHERE run_id = "
            f"{run_id} AND validation_state = 'valid') TO STDOUT"
        )
        return ["psql", "-X", "-q", "-c", sql]

    def export_argv(run_id: int, fmt: str, root: Path = ROOT) -> list[str]:
        return [sys.executable, str(root / "manage.py"), "export", str(run_id), "--format", fmt]

    report = Path(tempfile.mkdtemp(prefix="bench-export-")) / "rusage.json"
    samples: dict[tuple[int, str], list[dict]] = {}
    baseline: dict[tuple[int, str], list[dict]] = {}
    startups: list[float] = []
    for n in sizes:
        measure(copy_argv(runs[n]), psql_env, report)  # warm the table
    for rep in range(args.reps):
        startups.append(measure(export_argv(empty.pk, "csv"), child_env, report)["seconds"])
        print(f"rep {rep} start-up (empty export) {startups[-1]:.2f} s", flush=True)
        order = sizes if rep % 2 == 0 else list(reversed(sizes))
        for n in order:
            copy = measure(copy_argv(runs[n]), psql_env, report)
            copy_mbs = copy["bytes"] / 1e6 / copy["seconds"]
            print(
                f"rep {rep} {n:>9,} rows  COPY   {copy['seconds']:7.2f} s "
                f"{n / copy['seconds']:9,.0f} rows/s  {copy_mbs:7.1f} MB/s  "
                f"rss {copy['peak_rss_mb']:6.1f} MB",
                flush=True,
            )
            fmts = formats if rep % 2 == 0 else tuple(reversed(formats))
            # Ours and the baseline's (if any) in turn, the order swapped every repetition.
            sides = [("", ROOT, samples)]
            if args.baseline_root:
                sides.append(("baseline", args.baseline_root.resolve(), baseline))
            if rep % 2:
                sides.reverse()
            for fmt in fmts:
                for code, root, into in sides:
                    argv = export_argv(runs[n], fmt, root)
                    measured = measure(argv, child_env, report, keep=fmt == "parquet")
                    if fmt == "parquet":
                        counted = parquet_rows(measured.pop("output"))
                        if counted != n:
                            raise SystemExit(f"parquet export of {n:,} rows held {counted:,}")
                    got = pair(measured, copy)
                    into.setdefault((n, fmt), []).append(got)
                    print(
                        f"rep {rep} {n:>9,} rows  {fmt:<6} {got['seconds']:7.2f} s "
                        f"{n / got['seconds']:9,.0f} rows/s  ratio {got['ratio']:.2f}  "
                        f"{got['mb_per_s']:7.1f} MB/s (x{got['mb_ratio']:.2f})  "
                        f"rss {got['peak_rss_mb']:6.1f} MB  cpu {got['cpu_s']:.1f} s  {code}",
                        flush=True,
                    )

    startup = statistics.median(startups) if startups else 0.0
    results = summarise(samples, startup, baseline)
    if baseline:
        results += [{**r, "code": "baseline"} for r in summarise(baseline, startup)]
    if not (args.keep or args.reuse):
        drop_database(args.pg_name)
    for r in results:
        print(
            f"{r['rows']:>9,} rows {r['format']:<5}: {r['rows_per_s']:,} rows/s against COPY's "
            f"{r['copy_rows_per_s']:,}, ratio {r['ratio']} ({r['ratio_excl_startup']} without "
            f"start-up); {r['mb_per_s']} MB/s against {r['copy_mb_per_s']} (x{r['mb_ratio']}); "
            f"peak RSS {r['peak_rss_mb']} MB (growth x{r['rss_growth']})"
            + (f"; x{r['vs_baseline']} the baseline's speed" if "vs_baseline" in r else "")
            + (" [baseline]" if r.get("code") == "baseline" else ""),
            flush=True,
        )
    summary = {
        "bench": "export",
        "results": results,
        "python": platform.python_version(),
        **watch.finish(),
        "command": " ".join(["python", "bench/export.py", *sys.argv[1:]]),
    }
    refuse_if_spread(summary, ("ratio",), lambda r: f"{r['rows']:,} rows {r['format']}")
    line = json.dumps(summary)
    if args.save:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"export-{stamp}.json").write_text(line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
