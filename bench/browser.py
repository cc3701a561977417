"""Browser-provider throughput against a plain Playwright script on the same JS pages.

    python bench/browser.py [--pages 500] [--concurrency 4] [--reps 1]

1. The sandbox runs in its own process (`manage.py sandbox --port 0`, no faults); the pages
   are its script-rendered products, /js/product/1..N (the data arrives by fetch after load).
2. In this order, each timed as a whole process from start to exit (interpreter start,
   Chromium launch and shutdown included), CPU = the process and every descendant it reaped
   (its Playwright driver and Chromium):
   - the floor: `bench/browser.py --floor`, a plain Playwright script with no durability: one
     Chromium with the same flags, `--concurrency` lanes, a fresh context per page, images,
     fonts and media blocked the same way, the same wait (`div.product .price`), and the
     same extraction code (recovery.fetch.extraction) on `page.content()`; nothing is stored;
   - Salvage: `loaddataset` + `createrun` of the same URLs (not timed), then one
     `manage.py work --until-idle --concurrency C`: each page goes through the guarded
     proxy, the page-state checks, extraction and the durable commit (attempt, observation,
     task state on SQLite). The run is checked afterwards: every task committed, one
     observation per page.
   With --reps > 1 the two sides alternate (floor first, then Salvage first: ABBA).
3. Prints the load average and one line per measurement, then one JSON line:
   {"bench": "browser", "pages", "concurrency", "floor": {...}, "salvage": {...} (medians),
    "ratio": Salvage pages/s / floor pages/s of the same repetition (median over
    repetitions), "cpu_ratio", "target": 0.8, "loadavg_before", "loadavg_after",
    "headline", ...} (bench/loadwatch.py).
BENCH_PAGES sets the default page count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import SandboxProcess, compile_bytecode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = sys.executable
WAIT_FOR = "div.product .price"
BLOCK = ("image", "font", "media")
FIELDS = {
    "title": {"selector": "div.product h1", "required": True},
    "price": {"selector": ".price", "type": "decimal", "required": True},
    "sku": {"selector": "[data-sku]", "attr": "data-sku", "required": True},
    "in_stock": {"selector": ".stock", "attr": "data-in-stock", "type": "bool"},
    "reviews": {"selector": ".reviews", "type": "int"},
    "retailer": {"selector": "[data-retailer]", "attr": "data-retailer"},
}


def log(msg: str) -> None:
    print(msg, flush=True)


def spec_toml(concurrency: int) -> str:
    # Inline TOML tables, written from the same FIELDS the floor extracts with.
    fields = "\n".join(
        f"{name} = {{ "
        + ", ".join(
            f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}"
            for k, v in f.items()
        )
        + " }"
        for name, f in FIELDS.items()
    )
    return f"""name = "bench-js"
provider = "browser"
max_attempts = 3

[entity_key]
field = "sku"

[partition]
rule = "host"

[provider_options]
concurrency = {concurrency}
per_host = {concurrency}
wait_for = "{WAIT_FOR}"
deadline = 60.0

[page_types.product]
expect = {{ selector = "div.product" }}
empty_shell = {{ min_text_chars = 40 }}

[page_types.product.fields]
{fields}
"""


# --- the floor: plain Playwright, no durability ------------------------------------------------


async def floor(base: str, pages: int, concurrency: int) -> int:
    from playwright.async_api import async_playwright
    from selectolax.lexbor import LexborHTMLParser

    from recovery.fetch import extraction
    from recovery.fetch.chromium import CHROMIUM_ARGS

    executable = os.environ.get("SALVAGE_CHROMIUM", "/usr/bin/chromium")
    queue = list(range(pages, 0, -1))
    done = 0

    async def block(route) -> None:
        if route.request.resource_type in BLOCK:
            await route.abort("blockedbyclient")
        else:
            await route.continue_()

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS))

        async def lane() -> None:
            nonlocal done
            while queue:
                i = queue.pop()
                context = await browser.new_context()
                try:
                    await context.route("**/*", block)
                    page = await context.new_page()
                    await page.goto(f"{base}/js/product/{i}", wait_until="domcontentloaded")
                    await page.wait_for_selector(WAIT_FOR)
                    values = extraction.extract_fields(
                        LexborHTMLParser(await page.content()), FIELDS
                    )
                    if values.get("sku"):
                        done += 1
                finally:
                    await context.close()

        await asyncio.gather(*(lane() for _ in range(concurrency)))
        await browser.close()
    return done


# --- the harness -------------------------------------------------------------------------------


class Sandbox(SandboxProcess):
    def __init__(self, pages: int, workdir: Path) -> None:
        super().__init__(pages, workdir)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    cpu0 = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[2:4]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, _children_cpu() - cpu0, proc.stdout


def figures(pages: int, wall: float, cpu: float) -> dict[str, Any]:
    return {
        "pages_per_s": round(pages / wall, 2),
        "cpu_ms_per_page": round(1000 * cpu / pages, 1),
        "wall_s": round(wall, 2),
    }


def manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [PY, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def salvage_run(base: str, pages: int, concurrency: int, workdir: Path, rep: int) -> dict:
    env = {**os.environ, "SALVAGE_INSECURE_DEV_KEY": "1", "PYTHONUNBUFFERED": "1"}
    env["SALVAGE_DATA_DIR"] = str(workdir / f"var-{rep}")
    env["SALVAGE_ALLOWED_NETWORKS"] = f"127.0.0.1:{base.rsplit(':', 1)[1]}"
    env["SALVAGE_LOG_LEVEL"] = "WARNING"
    env.pop("DATABASE_URL", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    spec = workdir / "bench-js.toml"
    spec.write_text(spec_toml(concurrency))
    manifest = workdir / "bench-js.csv"
    manifest.write_text(
        "url,page_type\n" + "".join(f"{base}/js/product/{i},product\n" for i in range(1, pages + 1))
    )
    manage(env, "migrate", "--noinput")
    manage(env, "loaddataset", str(spec))
    run_id = manage(env, "createrun", "bench-js", "--window", f"rep-{rep}", "--manifest",
                    str(manifest)).strip().splitlines()[-1]  # fmt: skip
    cmd = [PY, str(ROOT / "manage.py"), "work", "--until-idle", "--idle-wait", "0",
           "--concurrency", str(concurrency), "--batch", str(max(concurrency * 4, 8))]  # fmt: skip
    wall, cpu, _ = timed(cmd, env)
    status = json.loads(manage(env, "runstatus", run_id, "--json"))
    committed = status["tasks"].get("committed", 0)
    if committed != pages or status["observations"] != pages:
        raise RuntimeError(f"run {run_id} is incomplete: {status['tasks']}, {status}")
    return figures(pages, wall, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=int(os.environ.get("BENCH_PAGES", 500)))
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--floor", metavar="BASE_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    compile_bytecode(ROOT)
    if args.floor:
        done = asyncio.run(floor(args.floor, args.pages, args.concurrency))
        print(json.dumps({"done": done}))
        sys.exit(0 if done == args.pages else 1)

    from loadwatch import LoadWatch

    watch = LoadWatch(own_processes=2)  # the worker (or script) and its Chromium
    with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp:
        workdir = Path(tmp)
        sandbox = Sandbox(args.pages, workdir)
        try:
            pairs = []
            for rep in range(args.reps):
                pair: dict[str, dict] = {}
                # Floor first in even repetitions, Salvage first in odd ones (ABBA).
                for side in ("floor", "salvage") if rep % 2 == 0 else ("salvage", "floor"):
                    if side == "floor":
                        cmd = [PY, __file__, "--floor", sandbox.base_url, "--pages",
                               str(args.pages), "--concurrency", str(args.concurrency)]  # fmt: skip
                        wall, cpu, _ = timed(cmd, {**os.environ, "PYTHONUNBUFFERED": "1"})
                        pair[side] = figures(args.pages, wall, cpu)
                    else:
                        pair[side] = salvage_run(
                            sandbox.base_url, args.pages, args.concurrency, workdir, rep
                        )
                    log(f"{side} rep {rep}: {pair[side]}")
                pairs.append(pair)
        finally:
            sandbox.stop()
    summary = {
        "bench": "browser",
        "pages": args.pages,
        "concurrency": args.concurrency,
        **summarise(pairs),
        "target": 0.8,
        **watch.finish(),
        "command": " ".join(["python", "bench/browser.py", *sys.argv[1:]]),
    }
    print(json.dumps(summary), flush=True)


def summarise(pairs: list[dict[str, dict]]) -> dict[str, Any]:
    """Medians per side, and ratio = Salvage pages/s / floor pages/s of the same repetition,
    median over repetitions (cpu_ratio the same for CPU per page)."""
    med = statistics.median

    def side(name: str) -> dict[str, float]:
        keys = pairs[0][name].keys()
        return {k: round(med(p[name][k] for p in pairs), 3) for k in keys}

    return {
        "reps": len(pairs),
        "floor": side("floor"),
        "salvage": side("salvage"),
        "ratio": round(
            med(p["salvage"]["pages_per_s"] / p["floor"]["pages_per_s"] for p in pairs), 3
        ),
        "cpu_ratio": round(
            med(p["salvage"]["cpu_ms_per_page"] / p["floor"]["cpu_ms_per_page"] for p in pairs), 3
        ),
    }


if __name__ == "__main__":
    main()
