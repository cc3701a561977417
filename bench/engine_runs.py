"""Whole `manage.py work` runs for the benches that time them (db_latency, sizing, archive_run):
the engine's environment, the shop sandbox, `work --until-idle` processes, one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from common import PY, ROOT, SandboxProcess

RESULTS = ROOT / "bench" / "results"
WORK = [PY, str(ROOT / "manage.py"), "work", "--until-idle", "--idle-wait", "0"]


def manage(env: dict[str, str], *args: str) -> str:
    """`manage.py ARGS` to its end; its standard output, or RuntimeError with its output."""
    done = subprocess.run([PY, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return done.stdout


def engine_env(workdir: Path, database_url: str) -> dict[str, str]:
    """This process's environment without its Django and Salvage settings, then the bench's:
    a data directory under `workdir`, the sandbox on loopback allowed, warnings only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SALVAGE_"))}
    env.update(SALVAGE_INSECURE_DEV_KEY="1", SALVAGE_DATA_DIR=str(workdir / "var"),
               SALVAGE_ALLOWED_NETWORKS="127.0.0.0/8", SALVAGE_LOG_LEVEL="WARNING",
               DATABASE_URL=database_url)  # fmt: skip
    return env


def shop_sandbox(pages: int, workdir: Path) -> tuple[SandboxProcess, Path, Path]:
    """The sandbox shop (no faults) in its own process, with its spec (dataset `bench-shop`)
    and manifest written under `workdir`."""
    spec, manifest = workdir / "shop.toml", workdir / "shop.csv"
    sandbox = SandboxProcess(pages, workdir, ["--spec-out", str(spec), "--manifest-out",
                             str(manifest), "--dataset-name", "bench-shop"])  # fmt: skip
    return sandbox, spec, manifest


def start_workers(env: dict[str, str], workers: int, extra: Sequence[str] = (),
                  prefix: Sequence[str] = ()) -> list[subprocess.Popen]:  # fmt: skip
    """`workers` processes of `work --until-idle` (+ `extra` flags), each under `prefix`."""
    cmd = [*prefix, *WORK, *extra]
    return [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE) for _ in range(workers)]  # fmt: skip


def finish_workers(procs: list[subprocess.Popen]) -> None:
    """Wait for each; RuntimeError with its last output if one did not exit 0."""
    errors = [p.communicate()[1] for p in procs]
    for proc, err in zip(procs, errors, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"work exited {proc.returncode}:\n{err.decode()[-3000:]}")


def committed(env: dict[str, str], run_id: str) -> int:
    status = json.loads(manage(env, "runstatus", run_id, "--json"))
    return status["tasks"].get("committed", 0)


def report(summary: dict, name: str, save: bool) -> None:
    """The summary as the bench's last line; with `save`, also bench/results/NAME-<stamp>.json."""
    line = json.dumps(summary)
    if save:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%MZ")
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{name}-{stamp}.json").write_text(line + "\n")
    print(line, flush=True)
