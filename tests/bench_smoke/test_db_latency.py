"""bench/db_latency.py (workers a network hop from PostgreSQL) at a tiny size, and its proxy.

The figures mean nothing at this size and are not checked; the proxy's delay is a lower bound
(a chunk is never forwarded before its time), so that much is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.bench_smoke.test_benches import ROOT, on_postgres, run_bench, server_url

pytestmark = pytest.mark.postgres


@pytest.fixture
def latency_proxy():
    if not on_postgres():
        pytest.skip("the proxy stands in front of PostgreSQL: run with DATABASE_URL=postgres://...")
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from latency_proxy import DelayProxy
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return DelayProxy


def round_trip(url: str, n: int = 10) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        start = time.perf_counter()
        for _ in range(n):
            conn.execute("SELECT 1").fetchone()
        return (time.perf_counter() - start) / n


def test_the_proxy_delays_each_direction_and_keeps_the_conversation(latency_proxy):
    server = urlsplit(server_url())
    with latency_proxy((server.hostname or "127.0.0.1", server.port or 5432), 0.005) as proxy:
        auth = server.netloc.rsplit("@", 1)[0] + "@" if "@" in server.netloc else ""
        url = urlunsplit(server._replace(netloc=f"{auth}127.0.0.1:{proxy.port}"))
        assert round_trip(url) >= 0.010  # 5 ms there and 5 ms back, at least
        with psycopg.connect(url, autocommit=True) as conn:  # a longer answer arrives whole
            rows = conn.execute("SELECT g, repeat('x', 1000) FROM generate_series(1, 500) g")
            assert [r[0] for r in rows.fetchall()] == list(range(1, 501))
        assert proxy.connections == 2


@pytest.mark.slow
@pytest.mark.worker
def test_db_latency_bench(latency_proxy):
    summary = run_bench("db_latency.py", "--pages", "60", "--reps", "1", "--delays", "1")
    assert summary["bench"] == "db_latency" and summary["delays_ms_each_way"] == [1.0]
    (row,) = summary["results"]
    assert row["complete"] and row["setting"] == "default"
    for side in ("direct", "proxy_0ms", "proxy_1ms"):
        assert row[f"{side}_pages_per_s"] > 0
    assert row["ratio_proxy_1ms_min"] <= row["ratio_proxy_1ms"] <= row["ratio_proxy_1ms_max"]
    assert row["round_trip_ms"]["proxy_1ms"] >= 2.0


@pytest.fixture
def netns():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import netns
    finally:
        sys.path.remove(str(ROOT / "bench"))
    why = netns.available()
    if why:
        pytest.skip(why)
    return netns


REACH = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)"


def test_the_workers_namespace_reaches_postgresql_only_across_the_link(latency_proxy, netns):
    server = urlsplit(server_url())
    port = server.port or 5432

    namespace = netns.WorkerNamespace(f"t{os.getpid()}")

    def reach(host: str, to: int) -> int:
        argv = [*namespace.prefix, sys.executable, "-c", REACH, host, str(to)]
        return subprocess.run(argv, capture_output=True, timeout=60).returncode

    upstream = (server.hostname or "127.0.0.1", port)
    with namespace, latency_proxy(upstream, 0.0, host=namespace.host_address) as proxy:
        assert reach("127.0.0.1", port) != 0  # the host's loopback is not the namespace's
        assert reach(namespace.host_address, proxy.port) == 0
        assert proxy.connections == 1
    # Gone on exit: asking for its processes fails.
    assert subprocess.run(["ip", "netns", "pids", namespace.name], capture_output=True).returncode


@pytest.mark.slow
@pytest.mark.worker
def test_db_latency_bench_across_namespaces(latency_proxy, netns):
    summary = run_bench("db_latency.py", "--pages", "60", "--reps", "1", "--delays", "1", "--netns")
    assert summary["network"] == "netns"
    (row,) = summary["results"]
    assert row["complete"]
    for side in ("direct", "netns_0ms", "netns_1ms"):
        assert row[f"{side}_pages_per_s"] > 0
    assert row["round_trip_ms"]["netns_1ms"] >= 2.0
