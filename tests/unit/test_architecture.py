"""The house's floors hold: every import-linter contract in pyproject.toml is kept.

CI runs `lint-imports` on its own as well; here the same contracts run with the unit tests, so
`make test` fails on an import that climbs a floor, naming the contract and the import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_it_keeps_every_import_contract():
    env = {**os.environ, "SALVAGE_INSECURE_DEV_KEY": "1"}
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_it_fails_on_an_import_that_climbs(tmp_path):
    # The same contract on a copy of the engine with one climbing import added: it must break.
    import shutil

    for package in ("recovery", "dashboard", "api"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    keys = tmp_path / "recovery" / "keys.py"
    keys.write_text(keys.read_text() + "\nfrom recovery import worker  # noqa: E402, F401\n")
    env = {**os.environ, "SALVAGE_INSECURE_DEV_KEY": "1", "PYTHONPATH": str(tmp_path)}
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "recovery.keys is not allowed to import recovery.worker" in proc.stdout
