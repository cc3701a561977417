"""What the page archive costs a whole `work` run: the same collection with it on and off.

    python bench/archive_run.py [--pages 20000] [--workers 2] [--reps 3] [--save]

bench/archive.py times the page path alone; here the claim, the commit and everything else a
run does are included. On a scratch PostgreSQL database, each repetition collects the sandbox
shop's pages twice with `--workers` processes of `manage.py work --until-idle`
(bench/db_latency.py's `collect`): `on` (SALVAGE_ARCHIVE_PAGES=1, the default, into an empty
artefact directory of its own, so every page is written) and `off`. The order alternates
(on-off, off-on, ...). Reported: each side's pages/s (start to the last worker's exit), the
ratio on/off paired per repetition (median, min, max), and the archive's bytes and files per
page. Ends with one JSON line with the load verdict (bench/loadwatch.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import drop_database, rotated, scratch_database, tree_bytes
from db_latency import collect
from engine_runs import engine_env, manage, report, shop_sandbox
from loadwatch import LoadWatch

SIDES = ("on", "off")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--save", action="store_true", help="also write bench/results/")
    args = parser.parse_args()

    watch = LoadWatch(own_processes=args.workers + 2)  # the workers, the sandbox, PostgreSQL
    workdir = Path(tempfile.mkdtemp(prefix="salvage-bench-archive-run-"))
    name = f"salvage_bench_archive_run_{os.getpid()}"
    url = scratch_database(name)
    env = engine_env(workdir, url)
    sandbox, spec, manifest = shop_sandbox(args.pages, workdir)
    reps: list[dict[str, dict]] = []
    written: list[tuple[int, int]] = []
    try:
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "loaddataset", str(spec))
        warm = workdir / "warm.csv"  # not counted: caches a fresh database and interpreter fill
        warm.write_text("".join(manifest.read_text().splitlines(keepends=True)[:101]))
        collect(env, url, {}, args.workers, "warm-up", warm)
        n = 0
        for rep in range(args.reps):
            sample = {}
            for side in rotated(SIDES, rep):
                n += 1
                artefacts = workdir / f"artefacts-{n}"
                side_env = {**env, "SALVAGE_ARTEFACT_DIR": str(artefacts)}
                setting = {"archive": "1" if side == "on" else "0"}
                sample[side] = collect(side_env, url, setting, args.workers, f"w{n}", manifest)
                if side == "on":
                    written.append(tree_bytes(artefacts / "archive"))
                print(f"rep {rep + 1} {side}: {sample[side]}", flush=True)
            reps.append(sample)
    finally:
        sandbox.stop()
        drop_database(name)

    ratios = [r["on"]["pages_per_s"] / r["off"]["pages_per_s"] for r in reps]
    committed = reps[0]["on"]["committed"]
    summary = {
        "bench": "archive_run", "pages": args.pages, "workers": args.workers, "samples": reps,
        "on_pages_per_s": statistics.median(r["on"]["pages_per_s"] for r in reps),
        "off_pages_per_s": statistics.median(r["off"]["pages_per_s"] for r in reps),
        "ratio_on_off": round(statistics.median(ratios), 3),
        "ratio_on_off_min": round(min(ratios), 3), "ratio_on_off_max": round(max(ratios), 3),
        "archive_bytes_per_page": round(statistics.median(b for b, _ in written) / committed),
        "archive_files": [files for _, files in written],
        "complete": all(s["committed"] == args.pages for r in reps for s in r.values()),
    }  # fmt: skip
    print(f"archive on / off: x{summary['ratio_on_off']} pages/s "
          f"({summary['ratio_on_off_min']}-{summary['ratio_on_off_max']})", flush=True)  # fmt: skip
    summary.update(watch.finish())
    report(summary, "archive-run", args.save)
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
