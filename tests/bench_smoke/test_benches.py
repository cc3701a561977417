"""Every benchmark runs end to end at a tiny size, so the bench code cannot rot.

Each test runs one bench/*.py as its own process, the way `make bench-*` does, with sizes that
take seconds, and checks its final JSON line: it parses, names the bench, carries the ratio
keys bench/README.md reads and the load-average verdict (bench/loadwatch.py). The figures
themselves are meaningless at these sizes and are not checked. On the PostgreSQL pass of the
suite the benches use that server (each in its own scratch database); on the SQLite pass the
PostgreSQL-only benches (export, dashboard, api, claim_schema) skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
LOAD_KEYS = {
    "loadavg_before",
    "loadavg_after",
    "cpus",
    "foreign_cpu_share",
    "headline",
    "headline_reason",
}


def bench_module(name: str):
    """bench/<name>.py as a module (the benches import their siblings by plain name)."""
    bench_dir = str(ROOT / "bench")
    sys.path.insert(0, bench_dir)
    try:
        spec = importlib.util.spec_from_file_location(
            f"bench_{name}", ROOT / "bench" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(bench_dir)
    return module


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def server_url() -> str:
    """The PostgreSQL server of this test pass, at its maintenance database."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/postgres"))


def scratch_name(bench: str) -> str:
    return f"salvage_smoke_{bench}_{uuid.uuid4().hex[:8]}"


def run_bench(script: str, *args: str, ok_codes: tuple[int, ...] = (0,)) -> dict:
    """Run bench/<script> with args; return its final JSON line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the benches set up their own settings
    if on_postgres():
        env["BENCH_DATABASE_URL"] = server_url()
    else:
        env.pop("DATABASE_URL", None)
        env.pop("BENCH_DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in ok_codes, f"{script} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing:\n{proc.stderr[-4000:]}"
    summary = json.loads(lines[-1])
    assert summary.keys() >= LOAD_KEYS, sorted(summary)
    assert isinstance(summary["headline"], bool)
    assert len(summary["loadavg_before"]) == len(summary["loadavg_after"]) == 3
    assert "load average before:" in proc.stdout and "load average after:" in proc.stdout
    return summary


# --- the definitions of the figures ---------------------------------------------------------


def test_a_run_on_a_busy_box_is_never_headlined():
    verdict = bench_module("loadwatch").headline_verdict
    ok, reason = verdict((2.5, 1.0, 1.0), (1.0, 1.0, 1.0), cpus=2, own_processes=2)
    assert not ok and "2.50 before the run > 2 cores" in reason
    # The bench's own processes count in the load after it; more than that is someone else.
    assert verdict((1.5, 1, 1), (3.9, 1, 1), cpus=2, own_processes=2)[0]
    ok, reason = verdict((1.5, 1, 1), (4.1, 1, 1), cpus=2, own_processes=2)
    assert not ok and "4.10 after the run" in reason
    assert verdict((2.0, 9, 9), (2.0, 9, 9), cpus=2, own_processes=0)[0]  # 1-minute figures


def test_a_run_during_which_others_used_the_box_is_never_headlined():
    loadwatch = bench_module("loadwatch")
    quiet = (0.5, 0.5, 0.5)
    ok, reason = loadwatch.headline_verdict(
        quiet, quiet, cpus=2, own_processes=2, foreign_share=0.11
    )
    assert not ok and "other processes used 11% of the 2 cores" in reason
    assert loadwatch.headline_verdict(quiet, quiet, cpus=2, own_processes=2, foreign_share=0.09)[0]
    # foreign share = (the box's busy seconds - the bench's own) / (wall seconds x cores)
    assert loadwatch.foreign_share((0.0, 10.0, 5.0), (2.0, 13.0, 6.0), cpus=2) == 0.5
    assert loadwatch.foreign_share((0.0, 10.0, 5.0), (2.0, 11.0, 6.5), cpus=2) == 0.0


def test_the_benchs_own_cpu_counts_its_children_reaped_and_alive():
    own_seconds = bench_module("loadwatch").own_seconds
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    start = own_seconds()
    subprocess.run([sys.executable, "-c", burn], check=True)  # reaped
    alive = subprocess.Popen(
        [sys.executable, "-c", burn + "print('done', flush=True)\ninput()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert alive.stdout.readline().strip() == "done"
        assert own_seconds() - start >= 0.6
    finally:
        alive.kill()
        alive.wait()


def test_claim_ratios_are_paired_per_repetition_against_the_bare_floor():
    summarise = bench_module("claim").summarise
    # (tasks/s, CPU ms per task, database backends' CPU ms per task) per kind and repetition.
    samples = [
        {"floor": (1000, 0.2, 0.1), "schema_floor": (500, 0.3, 0.2), "engine": (500, 0.4, 0.3)},
        {"floor": (400, 0.2, 0.1), "schema_floor": (400, 0.3, 0.2), "engine": (300, 0.6, 0.2)},
    ]
    row = summarise("postgresql", 2, samples, dry=False)
    # Paired: median(500/1000, 300/400) = 0.625, not median(engine) / median(floor) = 0.571.
    assert row["ratio"] == 0.625 and (row["ratio_min"], row["ratio_max"]) == (0.5, 0.75)
    assert row["ratio_schema"] == pytest.approx((1.0 + 0.75) / 2)
    assert row["bare_floor_per_s"] == 700 and row["schema_floor_per_s"] == 450
    assert row["cpu_ratio"] == pytest.approx(2.5) and row["db_cpu_ratio"] == pytest.approx(2.5)
    assert row["engine_cpu_ms_per_task"] == 0.5 and row["bare_floor_db_cpu_ms_per_task"] == 0.1


def test_the_pipelining_gain_is_paired_with_the_serial_engine_of_the_same_round():
    summarise = bench_module("claim").summarise
    samples = [
        {
            "floor": (1000, 0.2, 0.1),
            "schema_floor": (500, 0.3, 0.2),
            "engine": (800, 0.4, 0.3),
            "engine_serial": (400, 0.5, 0.3),
        },
        {
            "floor": (500, 0.2, 0.1),
            "schema_floor": (400, 0.3, 0.2),
            "engine": (450, 0.4, 0.2),
            "engine_serial": (300, 0.4, 0.2),
        },
    ]
    row = summarise("postgresql", 1, samples, dry=False)
    # median(800/400, 450/300) = 1.75; the serial engine against the floor: median(0.4, 0.6).
    assert row["pipelined_gain"] == 1.75
    assert (row["pipelined_gain_min"], row["pipelined_gain_max"]) == (1.5, 2.0)
    assert row["ratio_serial"] == 0.5 and row["engine_serial_per_s"] == 350
    assert row["pipelined_cpu_ratio"] == pytest.approx((0.8 + 1.0) / 2)
    # Without the fourth kind, no such figures.
    plain = [{k: v for k, v in s.items() if k != "engine_serial"} for s in samples]
    assert "pipelined_gain" not in summarise("postgresql", 1, plain, dry=False)


def test_a_run_whose_repetitions_disagree_is_no_headline():
    common = bench_module("common")

    def label(row: dict) -> str:
        return f"{row['db']} x{row['workers']}"

    steady = {"db": "postgresql", "workers": 1, "ratio_min": 0.5, "ratio_max": 0.74}
    assert common.spread_verdict([steady], ("ratio",), label) == ""
    # 2026-12-01 13:21 UTC: 0.288-0.852 at 1 worker, with 0% foreign CPU.
    unsteady = {"db": "postgresql", "workers": 2, "ratio_min": 0.288, "ratio_max": 0.852}
    reason = common.spread_verdict([steady, unsteady], ("ratio",), label)
    assert reason.startswith("postgresql x2:") and "0.288-0.852" in reason
    assert "x2.96 > x1.5" in reason
    # Only the named ratios count, and a load line's "yes" is overruled.
    summary = {"results": [steady, unsteady], "headline": True}
    common.refuse_if_spread(summary, ("ratio_scrapy",), label)
    assert summary["headline"] is True
    common.refuse_if_spread(summary, ("ratio",), label)
    assert summary["headline"] is False and summary["headline_reason"] == reason


def test_scrape_ratios_are_salvage_over_each_side_of_the_same_repetition():
    summarise = bench_module("scrape").summarise

    def side(pages_per_s: float, cpu: float, db: float = 0.0) -> dict:
        return {
            "pages_per_s": pages_per_s,
            "cpu_ms_per_page": cpu,
            "db_server_cpu_ms_per_page": db,
            "sandbox_cpu_ms_per_page": 0.1,
            "complete": True,
        }

    pairs = [
        {"salvage": side(400, 2.0, 0.5), "scrapy": side(200, 4.0), "floor": side(800, 1.0, 0.2)},
        {"salvage": side(300, 1.0, 0.3), "scrapy": side(600, 4.0), "floor": side(1000, 0.5, 0.1)},
    ]
    row = summarise("postgres", 2, 16, pairs)
    assert row["ratio_scrapy"] == pytest.approx((2.0 + 0.5) / 2)
    assert (row["ratio_scrapy_min"], row["ratio_scrapy_max"]) == (0.5, 2.0)  # the spread rule's
    assert row["ratio_floor"] == pytest.approx((0.5 + 0.3) / 2)
    assert row["cpu_ratio_scrapy"] == pytest.approx((0.5 + 0.25) / 2)
    assert row["cpu_ratio_floor"] == pytest.approx(2.0)
    # the CPU ratios are judged by the spread rule too, and every repetition is kept
    assert (row["cpu_ratio_scrapy_min"], row["cpu_ratio_scrapy_max"]) == (0.25, 0.5)
    assert row["samples"][1]["scrapy"]["pages_per_s"] == 600
    assert row["pages_per_s"] == 350 and row["floor_db_server_cpu_ms_per_page"] == 0.15
    assert row["complete"] and "ratio_scrapy_untuned" not in row
    pairs[1]["floor"]["complete"] = False
    assert not summarise("postgres", 2, 16, pairs)["complete"]


def test_the_sides_order_rotates_so_none_always_sits_in_the_middle():
    rotated = bench_module("common").rotated
    orders = [rotated(("a", "b", "c"), rep) for rep in range(3)]
    assert orders == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b")]
    for position in range(3):
        assert {order[position] for order in orders} == {"a", "b", "c"}


def test_scrape_baseline_side_is_paired_like_the_others():
    """--baseline-root: another checkout's worker as a side; Salvage / baseline per repetition."""
    summarise = bench_module("scrape").summarise

    def side(pages_per_s: float, cpu: float) -> dict:
        return {
            "pages_per_s": pages_per_s,
            "cpu_ms_per_page": cpu,
            "db_server_cpu_ms_per_page": 0.1,
            "sandbox_cpu_ms_per_page": 0.1,
            "complete": True,
        }

    pairs = [
        {"salvage": side(400, 2.0), "baseline": side(200, 4.0)},
        {"salvage": side(300, 1.0), "baseline": side(300, 2.0)},
    ]
    row = summarise("postgres", 2, 16, pairs)
    assert row["ratio_baseline"] == pytest.approx((2.0 + 1.0) / 2)
    assert row["cpu_ratio_baseline"] == pytest.approx(0.5)
    assert "ratio_floor" not in row and row["complete"]  # --no-floor: no floor figures


def test_export_ratio_is_rows_per_second_against_copy_of_the_same_rows():
    export = bench_module("export")

    def measured(seconds: float, size: int, rss: float) -> dict:
        return {"seconds": seconds, "bytes": size, "peak_rss_mb": rss, "cpu_s": 0.1}

    # The export writes 1.5x COPY's bytes: by bytes it would look 1.5x better than it is.
    samples = {
        (1000, "csv"): [export.pair(measured(4.0, 1_500_000, 60), measured(2.0, 1_000_000, 9))],
        (10, "csv"): [export.pair(measured(0.55, 15_000, 50), measured(0.1, 10_000, 9))],
    }
    big, small = sorted(export.summarise(samples, startup=0.5), key=lambda r: r["rows"])[::-1]
    assert big["ratio"] == 0.5 and big["mb_ratio"] == 0.75
    assert (big["rows_per_s"], big["copy_rows_per_s"]) == (250, 500)
    assert big["ratio_excl_startup"] == pytest.approx(2.0 / 3.5, abs=1e-3)
    assert big["bytes_per_row"] == 1500 and big["copy_bytes_per_row"] == 1000
    assert big["rss_growth"] == small["rss_growth"] == 1.2
    # A start-up longer than most of the export's time gives no figure rather than noise.
    assert small["ratio_excl_startup"] is None


def test_browser_ratio_is_paired_per_repetition():
    summarise = bench_module("browser").summarise
    pairs = [
        {
            "floor": {"pages_per_s": 10, "cpu_ms_per_page": 100},
            "salvage": {"pages_per_s": 4, "cpu_ms_per_page": 200},
        },
        {
            "floor": {"pages_per_s": 4, "cpu_ms_per_page": 100},
            "salvage": {"pages_per_s": 4, "cpu_ms_per_page": 100},
        },
    ]
    row = summarise(pairs)
    # Paired: median(0.4, 1.0) = 0.7; the best of each side would give 4 / 10 = 0.4.
    assert row["ratio"] == 0.7 and row["cpu_ratio"] == 1.5
    assert row["floor"]["pages_per_s"] == 7 and row["reps"] == 2


# --- each bench at a tiny size ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.worker
def test_claim_bench():
    # A window of a few engine steps even on a loaded box (a step of 50 can take 0.5 s there).
    args = ["--reps", "2", "--seconds", "3", "--warmup", "0.3", "--tasks", "20000"]
    args += ["--pg-workers", "1", "--sqlite-workers", "1"]
    if on_postgres():
        # and the engine one batch at a time as well (the pipelining lever's before)
        args += ["--skip-sqlite", "--pg-url", server_url(), "--serial-engine"]
        args += ["--pipelined-floor"]  # and the bare floor pipelined like the engine
    else:
        args += ["--skip-pg"]
    summary = run_bench("claim.py", *args)
    assert summary["bench"] == "claim" and summary["notes"] == []
    (row,) = summary["results"]
    assert row["db"] == ("postgresql" if on_postgres() else "sqlite")
    for key in ("engine_per_s", "bare_floor_per_s", "schema_floor_per_s", "engine_cpu_ms_per_task"):
        assert row[key] > 0, key
    # The headline ratio is against the bare-table floor; the schema floor is the second one.
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert {"ratio_schema", "cpu_ratio", "db_cpu_ratio"} <= row.keys()
    if on_postgres():
        assert row["engine_db_cpu_ms_per_task"] > 0  # PostgreSQL's backends are counted
        assert row["engine_serial_per_s"] > 0 and row["pipelined_gain"] > 0
        assert row["pipelined_floor_per_s"] > 0 and row["ratio_pipelined_floor"] > 0
        lo, hi = row["ratio_pipelined_floor_min"], row["ratio_pipelined_floor_max"]
        assert lo <= row["ratio_pipelined_floor"] <= hi
        assert len(row["backend_pids_counted"]) >= 6  # both pipelined kinds hold two backends


@pytest.mark.slow
@pytest.mark.worker
def test_claim_schema_bench():
    if not on_postgres():
        pytest.skip("the schema-cost bench measures PostgreSQL's backends")
    args = ["--pg-url", server_url(), "--tasks", "500", "--reps", "1"]
    args += ["--variant", "none", "--variant", "task_secondary", "--variant", "fks"]
    summary = run_bench("claim_schema.py", *args)
    assert summary["bench"] == "claim_schema"
    assert [r["variant"] for r in summary["results"]] == ["none", "task_secondary", "fks"]
    for row in summary["results"]:
        assert row["a_db_cpu_ms_per_task"] >= 0 and len(row["per_rep"]) <= 1


@pytest.mark.slow
@pytest.mark.worker
def test_scrape_bench():
    with_scrapy = importlib.util.find_spec("scrapy") is not None
    if not with_scrapy and os.environ.get("CI"):
        pytest.fail("CI must install the bench extra (make install-bench): Scrapy is missing")
    args = ["--pages", "60", "--workers", "1", "--reps", "1", "--concurrency", "4"]
    if on_postgres():
        args += ["--dbs", "postgres", "--pg-name", scratch_name("scrape")]
        args += ["--pipelined-floor"]  # and the floor pipelined like the engine
        if with_scrapy:
            args += ["--scrapy-pg"]  # Scrapy persists to PostgreSQL too
    else:
        args += ["--dbs", "sqlite"]
    if with_scrapy:
        args += ["--scrapy-sweep"]  # the peer: the fastest of Scrapy's configurations
    if not with_scrapy:
        args.append("--no-scrapy")  # outside CI without the bench extra: Salvage and floor only
    # This checkout as its own baseline: the side runs through the same code path.
    summary = run_bench("scrape.py", *args, "--baseline-root", str(ROOT))
    assert summary["bench"] == "scrape"
    (row,) = summary["results"]
    assert row["complete"], row  # every side committed (or wrote) every page
    for key in ("pages_per_s", "floor_pages_per_s", "ratio_floor", "cpu_ratio_floor"):
        assert row[key] > 0, key
    assert row["baseline_pages_per_s"] > 0 and row["cpu_ratio_baseline"] > 0
    if with_scrapy:
        assert row["scrapy_pages_per_s"] > 0 and row["ratio_scrapy"] > 0
        assert row["cpu_ratio_scrapy"] > 0
    if with_scrapy:
        sweep = row["scrapy_sweep"]
        assert len(sweep["tried"]) == 8 and sweep["best"] in [t["args"] for t in sweep["tried"]]
        best = max(t["pages_per_s"] for t in sweep["tried"] if t["complete"])
        assert [t["pages_per_s"] for t in sweep["tried"] if t["args"] == sweep["best"]] == [best]
    if on_postgres():
        assert row["floor_pipelined_pages_per_s"] > 0 and row["ratio_floor_pipelined"] > 0
        assert row["samples"][0]["floor_pipelined"]["complete"]
        if with_scrapy:  # Scrapy's items committed to PostgreSQL, its backends counted
            assert row["samples"][0]["scrapy"]["complete"]
            # (60 pages' upserts can stay under one clock tick of a backend's CPU)
            assert row["scrapy_db_server_cpu_ms_per_page"] >= 0


@pytest.mark.slow
@pytest.mark.worker
def test_manifest_bench():
    db = "postgresql" if on_postgres() else "sqlite"
    args = ["--rows", "300", "--db", db, "--pg-name", scratch_name("manifest")]
    if on_postgres():
        args += ["--pg-url", server_url()]
    summary = run_bench("manifest.py", *args)
    assert summary["bench"] == "manifest"
    (row,) = summary["results"]
    assert row["db"] == db and row["rows"] == 300
    assert row["seconds"] > 0 and row["floor_seconds"] > 0 and row["ratio"] > 0


@pytest.mark.slow
@pytest.mark.postgres
def test_export_bench():
    if not on_postgres():
        pytest.skip("the export bench compares with PostgreSQL's COPY")
    args = ["--sizes", "300,1500", "--reps", "1", "--pg-name", scratch_name("export")]
    summary = run_bench("export.py", *args)
    assert summary["bench"] == "export"
    rows = {(r["rows"], r["format"]): r for r in summary["results"]}
    # Parquet's rows are counted from its footer by the bench, which fails unless they are N.
    assert set(rows) == {(n, fmt) for n in (300, 1500) for fmt in ("csv", "jsonl", "parquet")}
    for r in rows.values():
        # The headline is rows per second against COPY of the same rows; bytes come second.
        assert r["rows_per_s"] > 0 and r["copy_rows_per_s"] > 0 and r["ratio"] > 0
        assert r["mb_ratio"] > 0 and r["rss_growth"] > 0


@pytest.mark.slow
@pytest.mark.postgres
def test_dashboard_bench():
    if not on_postgres():
        pytest.skip("the dashboard bench measures PostgreSQL plans")
    args = ["--small", "200", "--large", "2000", "--reps", "1"]
    args += ["--pg-name", scratch_name("dashboard")]
    # Exit 1 means a target was missed (at these sizes the planner may well scan); a crash
    # prints no JSON line and fails below.
    summary = run_bench("dashboard.py", *args, ok_codes=(0, 1))
    assert summary["bench"] == "dashboard"
    pages = {r["page"]: r for r in summary["results"]}
    assert set(pages) == {
        "run_detail",
        "quarantine",
        "runs_overview",
        "tasks",
        "tasks_desc",
        "tasks_middle",
        "tasks_search",
        "tasks_search_host",
        "tasks_contains",
        "tasks_contains_broad",
        "tasks_exact_url",
        "tasks_quarantined",
        "tasks_partition",
        "tasks_partition_only",
        *(
            f"tasks_by_{sort}{suffix}"
            for sort in ("attempts", "http", "error_class", "changed")
            for suffix in ("", "_desc", "_middle")
        ),
        "runs_by_dataset",
        "runs_by_window",
        "runs_by_created",
        "export_first_chunk",
    }
    # Each task list reports the indexes its queries read (EXPLAIN-checked).
    assert all(isinstance(pages[p]["indexes"], list) for p in pages)
    assert all(r["growth"] > 0 for r in pages.values())


@pytest.mark.slow
@pytest.mark.postgres
def test_api_bench():
    if not on_postgres():
        pytest.skip("the API bench measures PostgreSQL plans")
    args = ["--small", "300", "--large", "3000", "--reps", "3", "--pg-name", scratch_name("api")]
    # Exit 1 means a target was missed (at these sizes the planner scans the small tables); a
    # crash prints no JSON line and fails below. The bench itself checks the pages' lengths.
    summary = run_bench("api.py", *args, ok_codes=(0, 1))
    assert summary["bench"] == "api"
    assert (summary["small"], summary["large"]) == (300, 3000)
    requests = {r["request"]: r for r in summary["results"]}
    assert set(requests) == {
        "rows_first",
        "rows_middle",
        "rows_last",
        "changes_start",
        "changes_middle",
        "changes_end",
    }
    for r in requests.values():
        assert 0 < r["small_p50_ms"] <= r["small_p95_ms"]
        assert 0 < r["large_p50_ms"] <= r["large_p95_ms"]
        assert r["growth"] > 0 and r["queries"] > 0 and isinstance(r["indexes"], list)


@pytest.mark.slow
def test_http_transport_bench():
    summary = run_bench(
        "http_transport.py", "--pages", "60", "--reps", "2", "--concurrency", "4", "--no-httpcore"
    )
    assert summary["bench"] == "http_transport"
    assert set(summary["results"]) == {"aiohttp", "httpx-aiohttp"}
    paired = summary["direct_over_httpx_aiohttp"]
    assert len(paired["cpu_per_page_rounds"]) == len(paired["pages_per_s_rounds"]) == 2
    assert paired["cpu_per_page"] > 0 and paired["pages_per_s"] > 0


@pytest.mark.slow
def test_archive_bench():
    summary = run_bench("archive.py", "--pages", "40", "--reps", "2", "--concurrency", "4")
    assert summary["bench"] == "archive"
    assert set(summary["results"]) == {"fetch", "fetch_archiving", "archive"}
    for key in ("archive_over_fetch", "fetch_archiving_over_fetch"):
        paired = summary[key]
        assert len(paired["pages_per_s_rounds"]) == len(paired["cpu_per_page_rounds"]) == 2
        assert paired["pages_per_s"] > 0 and paired["cpu_per_page"] > 0
    # Every page archived once, compressed: fewer bytes on disk than its body.
    assert summary["archive_files"] == 40
    assert 0 < summary["archive_bytes_per_page"] < summary["body_bytes_per_page"]


@pytest.mark.slow
@pytest.mark.postgres
def test_sizing_bench():
    if not on_postgres():
        pytest.skip("the sizing bench reads PostgreSQL's relation sizes and backends")
    summary = run_bench("sizing.py", "--pages", "200", "--workers", "2")
    assert summary["bench"] == "sizing" and summary["complete"]
    assert summary["committed"] == 200
    # Per `work` on PostgreSQL: its own, the commit lane's and (once it has beaten) its
    # heartbeat thread's: production.md's sizing says three.
    assert 2 * 2 <= summary["connections_peak"] <= 3 * 2
    assert summary["worker_rss_mb_peak"] > 20
    tables = summary["tables_bytes_per_task"]
    assert tables["recovery_task"] > 0 and tables["recovery_observation"] > 0
    assert summary["db_bytes_per_task"] >= sum(tables.values())
    assert summary["artefact_files"] == 200 and summary["artefact_bytes_per_page"] > 0


@pytest.mark.slow
@pytest.mark.postgres
def test_archive_run_bench():
    if not on_postgres():
        pytest.skip("whole `work` runs pipeline their commits on PostgreSQL, as deployed")
    summary = run_bench("archive_run.py", "--pages", "60", "--reps", "2")
    assert summary["bench"] == "archive_run" and summary["complete"]
    assert [set(sample) for sample in summary["samples"]] == [{"on", "off"}] * 2
    assert summary["ratio_on_off_min"] <= summary["ratio_on_off"] <= summary["ratio_on_off_max"]
    # Each `on` side wrote every page into its own empty archive; `off` wrote none.
    assert summary["archive_files"] == [60, 60] and summary["archive_bytes_per_page"] > 0
