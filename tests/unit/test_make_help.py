"""`make help` names every target of the Makefile."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_make_help_lists_every_target():
    if shutil.which("make") is None:
        pytest.skip("needs make")
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    done = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    named = set(re.findall(r"^make ([a-z-]+)", done.stdout, re.M))
    benches = set(done.stdout.split("NAME one of\n")[1].splitlines()[0].split())
    named |= {f"bench-{name}" for name in benches}
    assert targets - named == set()
