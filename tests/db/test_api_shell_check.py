"""docs/api.md's "Checking a download" lines, run as written against a live server.

The block's text is taken from docs/api.md; only what a reader substitutes changes: the
server's address (`https://salvage.example`), the dataset's name (`shop`) and `$TOKEN`. It
must pass on a whole download and fail on the same file cut short by a row.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.db.test_api import accepted, token_for
from tests.support.world import make_user

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def check_block() -> str:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    found = re.search(r"\*\*Checking a download\.\*\*.*?```sh\n(.*?)```", text, re.S)
    assert found, 'docs/api.md has no "Checking a download" block'
    return found.group(1)


def test_the_documented_check_passes_on_a_whole_download_and_fails_on_a_cut_one(
    live_server, settings, tmp_path
):
    if not shutil.which("curl"):
        pytest.skip("the documented check uses curl")
    settings.SALVAGE_EXPORT_CACHE_DIR = tmp_path / "export-cache"
    settings.SALVAGE_OUTBOX_WAKE = False
    run = accepted(per_partition=9)
    name = run.dataset.name
    block = check_block().replace("https://salvage.example", live_server.url)
    block = block.replace("/datasets/shop/", f"/datasets/{name}/")
    env = {**os.environ, "TOKEN": token_for(make_user("erin", "exporter"))}

    def run_check(script: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    done = run_check(block)
    assert done.returncode == 0, done.stderr
    saved = (tmp_path / "shop.csv").read_text()
    assert saved.count("\n") == 1 + 9

    # The same check on a file that lost its last row: the download line is skipped (it would
    # fetch the file whole again), the comparison fails.
    (tmp_path / "shop.csv").write_text("".join(saved.splitlines(keepends=True)[:-1]))
    download, compare = block.strip().split("\n", 1)
    assert download.startswith("rows=$(curl") and compare.startswith("test ")
    rows = re.sub(r"^rows=\$\(.*\)$", "rows=9", download)
    cut = run_check(f"{rows}\n{compare}")
    assert cut.returncode != 0
