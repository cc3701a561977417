"""Workers on other machines: `manage.py work` throughput with PostgreSQL a network hop away.

The same sandbox run is collected by N `work --until-idle` processes talking to PostgreSQL
directly, and through bench/latency_proxy.py on loopback with 0 ms (the proxy's own cost),
1 ms and 10 ms added each way. For each worker setting (the default: batches of 50,
pipelined commits; others with --settings) the JSON line gives pages/s per side and the
ratio of each side to direct, paired repetition by repetition (the sides rotate: ABCD, BCDA,
...), with the median, min and max; the measured round trip of `SELECT 1` per side; and the
load-average verdict (bench/loadwatch.py). A benchmark, not a test: nothing here asserts a
speed (tests/bench_smoke/test_db_latency.py runs it at a tiny size).

    .venv/bin/python bench/db_latency.py --pages 3000 --workers 2 --reps 2 \\
        --settings default,batch=200,pipeline=0 --save

`--settings`: comma-separated; each is `default` or `+`-joined `batch=N` (work --batch),
`pipeline=0|1` (SALVAGE_PIPELINE_COMMITS), `concurrency=N` (work --concurrency), `archive=0|1`
(SALVAGE_ARCHIVE_PAGES).

`--netns` (root): the workers run in a network namespace of their own (bench/netns.py), with
their own sandbox, and reach PostgreSQL across a veth pair through the proxy listening on the
host's end: sides `netns_0ms` (the link and the proxy, nothing added), `netns_1ms`, ...; the
`direct` side stays on this namespace's loopback, with a sandbox of its own, as the baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PY, SandboxProcess, rotated, scratch_database, server_url
from engine_runs import (
    committed,
    engine_env,
    finish_workers,
    manage,
    report,
    shop_sandbox,
    start_workers,
)
from latency_proxy import DelayProxy
from loadwatch import LoadWatch
from netns import WorkerNamespace


def log(msg: str) -> None:
    print(msg, flush=True)


def parse_setting(text: str) -> dict[str, str]:
    if text == "default":
        return {}
    setting = {}
    for part in text.split("+"):
        key, _, value = part.partition("=")
        if key not in ("batch", "pipeline", "concurrency", "archive") or not value.isdigit():
            raise SystemExit(
                f"--settings: {part!r} is not batch=N, pipeline=0|1, concurrency=N or archive=0|1"
            )
        setting[key] = value
    return setting


ROUND_TRIP = """
import sys, time, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute("SELECT 1")
    start = time.perf_counter()
    for _ in range(int(sys.argv[2])):
        conn.execute("SELECT 1").fetchone()
    print(round(1000 * (time.perf_counter() - start) / int(sys.argv[2]), 3))
"""


def round_trip_ms(url: str, prefix: list[str] | None = None, n: int = 30) -> float:
    """The mean round trip of `SELECT 1`, measured where the workers run (under `prefix`)."""
    done = subprocess.run([*(prefix or []), PY, "-c", ROUND_TRIP, url, str(n)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"round trip to {url}: {done.stderr[-2000:]}")
    return float(done.stdout)


def drop_database(name: str) -> None:
    import psycopg

    admin = urlunsplit(urlsplit(server_url())._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def with_port(url: str, port: int, address: str = "127.0.0.1") -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"{address}:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def collect(env: dict[str, str], url: str, setting: dict[str, str], workers: int, window: str,
            manifest: Path, prefix: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """One run of the manifest by `workers` processes on `url` (started under `prefix`: a
    namespace's `ip netns exec`); pages/s start to last exit."""
    run_id = manage(env, "createrun", "bench-shop", "--window", window, "--manifest",
                    str(manifest)).strip().splitlines()[-1]  # fmt: skip
    extra = [arg for flag in ("batch", "concurrency") if flag in setting
             for arg in (f"--{flag}", setting[flag])]  # fmt: skip
    run_env = {**env, "DATABASE_URL": url}
    if "pipeline" in setting:
        run_env["SALVAGE_PIPELINE_COMMITS"] = setting["pipeline"]
    if "archive" in setting:
        run_env["SALVAGE_ARCHIVE_PAGES"] = setting["archive"]
    start = time.perf_counter()
    finish_workers(start_workers(run_env, workers, extra, prefix or ()))
    wall = time.perf_counter() - start
    done = committed(env, run_id)
    return {"wall_s": round(wall, 3), "committed": done, "pages_per_s": round(done / wall, 1)}


def summarise(name: str, reps: list[dict[str, dict]], sides: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"setting": name, "samples": reps}
    for side in sides:
        row[f"{side}_pages_per_s"] = statistics.median(r[side]["pages_per_s"] for r in reps)
        if side != "direct":
            ratios = [r[side]["pages_per_s"] / r["direct"]["pages_per_s"] for r in reps]
            row[f"ratio_{side}"] = round(statistics.median(ratios), 3)
            row[f"ratio_{side}_min"] = round(min(ratios), 3)
            row[f"ratio_{side}_max"] = round(max(ratios), 3)
    row["complete"] = all(s["committed"] == reps[0]["direct"]["committed"]
                          for r in reps for s in r.values())  # fmt: skip
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--delays", default="1,10", help="ms added each way, comma-separated")
    parser.add_argument("--settings", default="default")
    parser.add_argument("--netns", action="store_true",
                        help="workers in a network namespace, across a veth pair")  # fmt: skip
    parser.add_argument("--save", action="store_true", help="also write bench/results/")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",") if d]
    settings = {name: parse_setting(name) for name in args.settings.split(",")}
    kind = "netns" if args.netns else "proxy"
    sides = ["direct", f"{kind}_0ms", *(f"{kind}_{d:g}ms" for d in delays)]
    with contextlib.ExitStack() as stack:
        namespace = stack.enter_context(WorkerNamespace()) if args.netns else None
        watch = LoadWatch(own_processes=args.workers + 2)  # the workers, the sandbox, PostgreSQL
        workdir = Path(tempfile.mkdtemp(prefix="salvage-bench-latency-"))
        name = f"salvage_bench_latency_{os.getpid()}"
        direct_url = scratch_database(name)
        stack.callback(drop_database, name)
        env = engine_env(workdir, direct_url)
        sandbox, spec, manifest = shop_sandbox(args.pages, workdir)
        stack.callback(sandbox.stop)
        manifests = dict.fromkeys(sides, manifest)
        prefixes: dict[str, list[str]] = {}
        if namespace:
            # The far side's own sandbox, in the namespace beside its workers: the same pages.
            far = workdir / "far.csv"
            remote = SandboxProcess(args.pages, workdir, ["--manifest-out", str(far)],
                                    prefix=namespace.prefix, name="far-sandbox-var")  # fmt: skip
            stack.callback(remote.stop)
            for side in sides[1:]:
                manifests[side], prefixes[side] = far, namespace.prefix
        upstream = urlsplit(direct_url)
        listen = namespace.host_address if namespace else "127.0.0.1"
        target = (upstream.hostname or "127.0.0.1", upstream.port or 5432)
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "loaddataset", str(spec))
        urls = {"direct": direct_url}
        for side, delay in zip(sides[1:], [0.0, *delays], strict=True):
            proxy = stack.enter_context(DelayProxy(target, delay / 1000, host=listen))
            urls[side] = with_port(direct_url, proxy.port, listen)
        rtt = {side: round_trip_ms(url, prefixes.get(side)) for side, url in urls.items()}
        # Warm-up, not counted: the first run of a fresh database and interpreter pays for
        # caches every later one finds warm.
        warm = workdir / "warm.csv"
        warm.write_text("".join(manifest.read_text().splitlines(keepends=True)[:101]))
        collect(env, direct_url, {}, args.workers, "warm-up", warm)
        log(f"round trip of SELECT 1 (ms): {rtt}")
        rows = []
        n = 0
        for setting_name, setting in settings.items():
            reps = []
            for rep in range(args.reps):
                sample = {}
                for side in rotated(tuple(sides), rep):
                    n += 1
                    sample[side] = collect(env, urls[side], setting, args.workers, f"w{n}",
                                           manifests[side], prefixes.get(side))  # fmt: skip
                    log(f"{setting_name} rep {rep + 1} {side}: {sample[side]}")
                reps.append(sample)
            rows.append({**summarise(setting_name, reps, sides), "round_trip_ms": rtt})
    summary = {"bench": "db_latency", "pages": args.pages, "workers": args.workers,
               "network": "netns" if args.netns else "loopback",
               "delays_ms_each_way": delays, "results": rows, **watch.finish()}  # fmt: skip
    report(summary, "db-latency", args.save)
    return 0 if all(row["complete"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
