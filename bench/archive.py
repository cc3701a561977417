"""Re-extracting archived pages against refetching them (recovery.archive, issue 31 item 2).

Serves the sandbox shop (5 KB product pages, one retailer on its redesign) from a separate
process on 127.0.0.1, then runs the direct provider's whole page path (page checks, extraction,
children) over the same N product pages, three ways, in one process (16 in flight):

- `fetch`: fetched from the sandbox, not archived (SALVAGE_ARCHIVE_PAGES off): what a recovery
  batch cost before the archive;
- `fetch_archiving`: fetched and archived into an empty archive (every blob written): what a
  first pass costs now;
- `archive`: re-extracted from the archive `fetch_archiving` wrote, no request: what a
  "from the archive" batch costs.

The sides rotate each repetition (A B C, B C A, C A B). Reported per side: pages/s and client
CPU ms per page (the bench process; the sandbox's CPU is not counted, so refetching is if
anything flattered), the median over repetitions, and the ratios paired per repetition:
archive / fetch (the re-extraction's speed-up) and fetch_archiving / fetch (the archive's cost
on a first pass). The archive's bytes per page (compressed files on disk) and the body bytes
per page are measured on the written archive. Each side's observations must be identical
(the bench fails otherwise). robots.txt is not read (opted out with a reason) and the database
is not used: both sides skip the same work, so the ratios compare the fetch with the read.
Ends with one JSON line, with the load average before and after and the headline verdict
(bench/loadwatch.py).

    .venv/bin/python bench/archive.py [--pages 5000] [--reps 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from http_transport import free_port, wait_for_port
from loadwatch import LoadWatch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
os.environ.setdefault("SALVAGE_ALLOWED_NETWORKS", "127.0.0.0/8")
# No database in this bench: an unspaced host never asks for a shared turn, and this keeps
# it so.
os.environ["SALVAGE_SHARED_POLITENESS"] = "0"

SERVER = """
import sys
from aiohttp import web
from recovery.sandbox.site import make_app
web.run_app(make_app(pages=int(sys.argv[2]), faults="bad_retailer"), host="127.0.0.1",
            port=int(sys.argv[1]), print=None, access_log=None)
"""
SIDES = ("fetch", "fetch_archiving", "archive")


def spec(concurrency: int) -> dict:
    import tomllib

    from recovery.intake import specs
    from recovery.sandbox import server

    raw = tomllib.loads(server.shop_spec_toml(version=2, concurrency=concurrency))
    raw["robots"] = {"obey": False, "crawl_delay": False, "reason": "benchmark of the sandbox"}
    raw["provider_options"] = {**raw.get("provider_options", {}), "per_host": concurrency}
    return specs.validate(raw)


def inputs(base: str, pages: int, dataset: dict, archived: dict[int, str]) -> list:
    from recovery.outcomes import TaskInput

    return [
        TaskInput(
            task_id=i,
            task_key=f"k{i}",
            run_id=1,
            url=f"{base}/product/{i}",
            page_type="product",
            partition="",
            window="w",
            dataset=dataset["name"],
            attempt_count=1,
            lease_token=1,
            spec=dataset,
            archived=archived.get(i, ""),
        )
        for i in range(1, pages + 1)
    ]


async def run_side(tasks: list, options: dict) -> tuple[list, float, float]:
    from recovery.providers.direct import DirectProvider

    provider = DirectProvider(**options)
    try:
        await provider.execute_many(tasks[:1])  # warm: client, pool, first connection
        cpu, wall = time.process_time(), time.perf_counter()
        outcomes = await provider.execute_many(tasks)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await provider.aclose()
    return outcomes, cpu, wall


def observed(outcomes: list) -> list:
    failed = [o.error_detail for o in outcomes if not o.ok]
    assert not failed, f"{len(failed)} pages failed: {failed[:3]}"
    return [[(o.entity_key, o.payload) for o in outcome.observations] for outcome in outcomes]


def du(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*.gz") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    watch = LoadWatch(own_processes=2)  # this process and the sandbox's

    import django

    django.setup()
    from django.conf import settings

    dataset = spec(args.concurrency)
    options = dict(dataset["provider_options"])
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(args.pages)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-archive-"))
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    reference: list | None = None
    written: tuple[int, int] = (0, 0)
    body_bytes = 0
    try:
        wait_for_port(port, time.monotonic() + 30)
        base = f"http://127.0.0.1:{port}"
        # The archive the `archive` side reads: written once, before any measurement.
        settings.SALVAGE_ARTEFACT_DIR = scratch / "primed"
        settings.SALVAGE_ARCHIVE_PAGES = True
        primed, _cpu, _wall = asyncio.run(run_side(inputs(base, args.pages, dataset, {}), options))
        archived = {i + 1: o.artefact["archive"]["sha256"] for i, o in enumerate(primed)}
        reference = observed(primed)
        for rep in range(args.reps):
            order = SIDES[rep % 3 :] + SIDES[: rep % 3]
            for side in order:
                fresh = scratch / f"rep{rep}-{side}"
                settings.SALVAGE_ARTEFACT_DIR = scratch / "primed" if side == "archive" else fresh
                settings.SALVAGE_ARCHIVE_PAGES = side != "fetch"
                tasks = inputs(base, args.pages, dataset, archived if side == "archive" else {})
                outcomes, cpu, wall = asyncio.run(run_side(tasks, options))
                assert observed(outcomes) == reference, f"{side}: other observations"
                sources = {(o.artefact or {}).get("archive", {}).get("source") for o in outcomes}
                expected = {"fetch": {None}, "fetch_archiving": {"fetched"}, "archive": {"archive"}}
                assert sources == expected[side], (side, sources)
                results[side].append(
                    {"pages_per_s": args.pages / wall, "cpu_ms_per_page": cpu * 1000 / args.pages}
                )
                if side == "fetch_archiving":
                    written = du(fresh)
        from recovery.archive import store

        settings.SALVAGE_ARTEFACT_DIR = scratch / "primed"
        body_bytes = sum(len(store.get(name).body) for name in archived.values())
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {}
    for side, runs in results.items():
        summary[side] = {
            "pages_per_s": round(statistics.median(r["pages_per_s"] for r in runs), 1),
            "cpu_ms_per_page": round(statistics.median(r["cpu_ms_per_page"] for r in runs), 3),
        }
        print(f"{side:16s} {summary[side]}")

    def paired(a: str, b: str) -> dict:
        pairs = list(zip(results[a], results[b], strict=True))
        pps = [x["pages_per_s"] / y["pages_per_s"] for x, y in pairs]
        cpu = [x["cpu_ms_per_page"] / y["cpu_ms_per_page"] for x, y in pairs]
        return {
            "pages_per_s": round(statistics.median(pps), 3),
            "cpu_per_page": round(statistics.median(cpu), 3),
            "pages_per_s_rounds": [round(r, 3) for r in pps],
            "cpu_per_page_rounds": [round(r, 3) for r in cpu],
        }

    files, stored = written
    archive_over_fetch = paired("archive", "fetch")
    archiving_over_fetch = paired("fetch_archiving", "fetch")
    bytes_per_page = round(stored / max(files, 1), 1)
    body_per_page = round(body_bytes / max(args.pages, 1), 1)
    print(
        f"re-extraction from the archive: x{archive_over_fetch['pages_per_s']} the pages/s of "
        f"refetching, x{archive_over_fetch['cpu_per_page']} its CPU per page; archiving costs a "
        f"first pass x{archiving_over_fetch['pages_per_s']} pages/s; {bytes_per_page} bytes "
        f"per archived page on disk ({body_per_page} bytes of body)"
    )
    out = {
        "bench": "archive",
        "pages": args.pages,
        "reps": args.reps,
        "concurrency": args.concurrency,
        "results": summary,
        "archive_over_fetch": archive_over_fetch,
        "fetch_archiving_over_fetch": archiving_over_fetch,
        "archive_files": files,
        "archive_bytes_per_page": bytes_per_page,
        "body_bytes_per_page": body_per_page,
        "compression": round(bytes_per_page / body_per_page, 3) if body_per_page else None,
    }
    print(json.dumps({**out, **watch.finish()}), flush=True)


if __name__ == "__main__":
    main()
