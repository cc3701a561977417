"""The claim bench's CPU accounting follows a client that reconnects (issue 32).

The claim bench once took each engine process's backend pids when the process started and read
only those; the engine's commit thread calls close_old_connections() before every commit and
CONN_MAX_AGE is 60 s, so after a minute its work ran on a new backend the bench never read, and
the dead pid was skipped silently. These tests fail on that bench: the accounting must list
the new backend and count its CPU.
"""

from __future__ import annotations

import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.bench_smoke.test_benches import bench_module, on_postgres, run_bench, scratch_name
from tests.bench_smoke.test_benches import server_url as admin_url

pytestmark = pytest.mark.skipif(not on_postgres(), reason="PostgreSQL backends only")

# A client that works on one backend, reconnects, and works on a second one; it prints each
# backend's pid and its CPU (read from /proc after the work, before closing).
RECONNECTING_CLIENT = """
import sys, time, psycopg
from pathlib import Path
import os
def cpu(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
for _ in range(2):
    with psycopg.connect(sys.argv[1], autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        time.sleep(0.6)  # the accounting reads every 50 ms: it has seen this backend's CPU
        print(pid, cpu(pid), flush=True)
"""


@pytest.fixture
def scratch_db():
    name = scratch_name("acct")
    with psycopg.connect(admin_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(admin_url())._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_the_claim_accounting_counts_the_backend_a_reconnect_opens(scratch_db):
    claim = bench_module("claim")
    with psycopg.connect(scratch_db, autocommit=True) as idle:  # a backend there from the start
        with claim.DatabaseCpu(scratch_db) as accounting:
            start = time.monotonic()
            out = subprocess.run(
                [sys.executable, "-c", RECONNECTING_CLIENT, scratch_db],
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            ).stdout
            end = time.monotonic()
        first_pid = idle.info.backend_pid
    seen = [(int(p), float(c)) for p, c in (line.split() for line in out.strip().splitlines())]
    assert len(seen) == 2 and seen[0][0] != seen[1][0]
    counted = accounting.pids
    # both of the client's backends (the second opened after the accounting started, the first
    # gone before it stopped) and the one that was there from the start
    assert {pid for pid, _ in seen} | {first_pid} <= set(counted), (seen, counted)
    per_pid = accounting.per_pid()
    for pid, cpu in seen:
        assert per_pid[pid] >= cpu - 0.011, (pid, per_pid[pid], cpu)  # one clock tick
    total = accounting.seconds()
    assert total >= sum(cpu for _, cpu in seen) - 0.02
    assert total > 0.05  # three million rows counted are CPU on any box
    assert accounting.between(start, end) == pytest.approx(
        accounting.at(end) - accounting.at(start)
    )


@pytest.mark.slow
@pytest.mark.worker
def test_the_claim_bench_counts_every_backend_of_a_reconnecting_engine(monkeypatch):
    # CONN_MAX_AGE 0: the engine's connections close before every commit and reopen, so its
    # work runs on a new backend every batch; the bench must count them all.
    monkeypatch.setenv("SALVAGE_CONN_MAX_AGE", "0")
    args = ["--reps", "3", "--seconds", "2", "--warmup", "0.3", "--tasks", "80000"]
    args += ["--pg-workers", "1", "--skip-sqlite", "--pg-url", admin_url()]
    summary = run_bench("claim.py", *args)
    (row,) = summary["results"]
    # at start: one backend per floor and schema floor process, two per pipelined engine
    assert len(row["backend_pids_counted"]) > 4, row["backend_pids_counted"]
    assert row["engine_db_cpu_ms_per_task"] > 0
    # every repetition's figures are in the JSON line, and the CPU ratio is judged by spread
    assert not row["ran_dry"], "a worker ran out of tasks, which ends the rounds: raise --tasks"
    assert len(row["samples"]) == row["reps"] == 3
    assert {"floor", "schema_floor", "engine"} == row["samples"][0].keys()
    assert row["cpu_ratio_min"] <= row["cpu_ratio"] <= row["cpu_ratio_max"]
