"""CI smoke of `make bench-browser` at a tiny size: both sides run and the JSON line is whole.

The figures themselves are recorded by hand in bench/README.md (never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.browser_provider import need_chromium

pytestmark = [pytest.mark.worker, pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_browser_bench_runs_both_sides_and_prints_one_json_line(tmp_path):
    need_chromium()
    proc = subprocess.run(
        [sys.executable, "bench/browser.py", "--pages", "3", "--concurrency", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("load average before:")
    result = json.loads(lines[-1])
    assert result["bench"] == "browser" and result["pages"] == 3
    for side in ("floor", "salvage"):
        assert result[side]["pages_per_s"] > 0 and result[side]["cpu_ms_per_page"] > 0
    assert result["ratio"] == round(
        result["salvage"]["pages_per_s"] / result["floor"]["pages_per_s"], 3
    )
