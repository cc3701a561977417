"""Which transport behind recovery.fetch.guard fetches small pages faster?

Serves the sandbox shop (5 KB product pages) from a separate process on 127.0.0.1, then fetches
the same pages through fetch.fetcher.Fetcher with each transport (16 in flight, guard, per-host
gates, size cap, deadline, per-task cookies all active), alternating transports for `--reps`
rounds: `aiohttp` (Fetcher drives an aiohttp session directly, the default), `httpx-aiohttp`
(httpx's API over the httpx-aiohttp transport, the default before) and `httpcore` (httpx's own;
`--no-httpcore` skips it, it is slow). Reports client CPU ms per page and pages/s, the median of
each, and the paired ratio direct / httpx-aiohttp per round (same round, adjacent runs) with its
median. Ends with one JSON line, with the load average before and after and the headline
verdict (bench/loadwatch.py).

    .venv/bin/python bench/http_transport.py [--pages 2000] [--reps 3] [--concurrency 16]
        [--no-httpcore]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
os.environ.setdefault("SALVAGE_ALLOWED_NETWORKS", "127.0.0.0/8")

SERVER = """
import sys
from aiohttp import web
from recovery.sandbox.site import make_app
web.run_app(make_app(pages=int(sys.argv[2])), host="127.0.0.1", port=int(sys.argv[1]),
            print=None, access_log=None)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sandbox did not listen on {port}")


async def run(transport: str, base: str, pages: int, concurrency: int) -> dict:
    from recovery.fetch.fetcher import Fetcher

    fetcher = Fetcher(transport=transport, concurrency=concurrency, per_host=concurrency)
    urls = [f"{base}/product/{i}" for i in range(1, pages + 1)]
    queue = iter(urls)

    async def worker() -> int:
        n = 0
        for url in queue:
            page = await fetcher.fetch(url)
            page.text()
            n += page.status == 200
        return n

    await fetcher.fetch(urls[0])  # warm: client, pool, first connection
    cpu, wall = time.process_time(), time.perf_counter()
    ok = sum(await asyncio.gather(*(worker() for _ in range(concurrency))))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await fetcher.aclose()
    assert ok == pages, f"{transport}: {ok}/{pages} pages fetched"
    return {"pages_per_s": pages / wall, "cpu_ms_per_page": cpu * 1000 / pages}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--no-httpcore", action="store_true", help="skip httpx's own transport")
    args = parser.parse_args()
    watch = LoadWatch(own_processes=1)

    import django

    django.setup()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(args.pages)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    transports = ["httpx-aiohttp", "aiohttp"]
    if not args.no_httpcore:
        transports.insert(0, "httpcore")
    results: dict[str, list[dict]] = {t: [] for t in transports}
    try:
        wait_for_port(port, time.monotonic() + 20)
        base = f"http://127.0.0.1:{port}"
        for rep in range(args.reps):
            # Alternate the order each round, so neither side always runs first (warm caches,
            # a neighbour's burst).
            order = transports if rep % 2 == 0 else transports[::-1]
            for transport in order:
                results[transport].append(
                    asyncio.run(run(transport, base, args.pages, args.concurrency))
                )
    finally:
        server.terminate()
        server.wait(timeout=10)
    summary = {}
    for transport, runs in results.items():
        summary[transport] = {
            "pages_per_s": round(statistics.median(r["pages_per_s"] for r in runs), 1),
            "cpu_ms_per_page": round(statistics.median(r["cpu_ms_per_page"] for r in runs), 3),
        }
        print(f"{transport:13s} {summary[transport]}")
    # Paired per round: the direct path against the httpx-aiohttp path it replaces.
    direct, layered = results["aiohttp"], results["httpx-aiohttp"]
    pairs = list(zip(direct, layered, strict=True))
    cpu_ratios = [d["cpu_ms_per_page"] / h["cpu_ms_per_page"] for d, h in pairs]
    pps_ratios = [d["pages_per_s"] / h["pages_per_s"] for d, h in pairs]
    print(
        "direct / httpx-aiohttp per round: CPU per page "
        + ", ".join(f"{r:.2f}" for r in cpu_ratios)
        + "; pages/s "
        + ", ".join(f"{r:.2f}" for r in pps_ratios)
    )
    paired = {
        "cpu_per_page": round(statistics.median(cpu_ratios), 3),
        "pages_per_s": round(statistics.median(pps_ratios), 3),
        "cpu_per_page_rounds": [round(r, 3) for r in cpu_ratios],
        "pages_per_s_rounds": [round(r, 3) for r in pps_ratios],
    }
    out = {
        "bench": "http_transport",
        "pages": args.pages,
        "concurrency": args.concurrency,
        "results": summary,
        "direct_over_httpx_aiohttp": paired,
    }
    if "httpcore" in summary:
        out["httpx_aiohttp_over_httpcore"] = round(
            summary["httpx-aiohttp"]["pages_per_s"] / summary["httpcore"]["pages_per_s"], 2
        )
    print(json.dumps({**out, **watch.finish()}), flush=True)


if __name__ == "__main__":
    main()
