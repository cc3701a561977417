"""Every README walkthrough runs in CI exactly as the README writes it.

Each walkthrough is a fenced `sh` block after a `<!-- walkthrough: NAME ... -->` marker in
README.md, kept identical to docs/walkthroughs/NAME.sh. The tests run the block's text itself
(taken from the README) with bash -eu -o pipefail, with only what the text invites a reader to
choose set from outside: WORK (where it writes), PORT (a free port) and, for production,
DATABASE_URL (an empty PostgreSQL database). Lines starting with `#>` are the output the README
promises; each must appear in what the walkthrough printed.

WALKTHROUGH_SHA256 pins each block: editing a walkthrough in the README without coming here
(and running it) fails the suite.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from recovery.ops.processes import free_port

pytestmark = [pytest.mark.worker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- walkthrough: (\S+) [^\n]*-->\n```sh\n(.*?)```\n", re.S)
# sha256 of each block's text; update after changing a walkthrough and running these tests.
WALKTHROUGH_SHA256 = {
    "examples": "f80831d7818b0f4f2701d0656353cbad3dc1b12320d9db968a78ba6dc00f83b2",
    "schedules": "542742637e340dd4a2943c9c6d6d8956b0aee84de3f7a1bdf26150e42535f83c",
    "browser": "fa85e6714eb6d3a1cb63c8152fbc4935e1f87e36501bbc9ef8ce1f4d20aa5dca",
    "sandbox": "d81872ca734519549337dc1e04d21faad9f7f3cd7f2da37d9b43b908fa79a3f0",
    "remote": "5f5e680ddddb0db7c401443d05e6588cec1a37f1caaefbbdbcc7453a5b91b296",
    "production": "a4c64d96793dd3d4ac2348d15adb7f86f04a5b1629b67d18a52e334f12e2b073",
}


def readme_walkthroughs() -> dict[str, str]:
    found: dict[str, str] = {}
    for name, body in MARKER.findall((ROOT / "README.md").read_text(encoding="utf-8")):
        assert name not in found, f"two README walkthroughs named {name}"
        found[name] = body
    return found


def test_every_walkthrough_is_pinned_and_kept_as_a_script():
    blocks = readme_walkthroughs()
    assert set(blocks) == set(WALKTHROUGH_SHA256)
    for name, body in blocks.items():
        script = ROOT / "docs" / "walkthroughs" / f"{name}.sh"
        assert body == script.read_text(encoding="utf-8"), f"README and {script} differ"
        digest = hashlib.sha256(body.encode()).hexdigest()
        assert digest == WALKTHROUGH_SHA256[name], (
            f"the README's {name} walkthrough changed (sha256 {digest}): run this test file "
            "and update WALKTHROUGH_SHA256"
        )


def run_walkthrough(name: str, tmp_path: Path, **env: str) -> str:
    body = readme_walkthroughs()[name]
    base = {
        k: v
        for k, v in os.environ.items()
        # DJANGO_*: pytest-django's settings module and the browser tests' async switch must
        # not leak into a reader's shell (the production walkthrough's deploy check refuses
        # DJANGO_ALLOW_ASYNC_UNSAFE).
        if not k.startswith(
            ("SALVAGE_", "DATABASE_URL", "REDIS_URL", "MESSORA_", "SECRET_KEY", "DJANGO_")
        )
    }
    base.update(WORK=str(tmp_path / "work"), PORT=str(free_port()), **env)
    done = subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", body],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout.splitlines()
    for line in body.splitlines():
        if line.startswith("#> "):
            assert line[3:] in printed, f"{name}: expected {line[3:]!r} in\n{done.stdout}"
    return done.stdout


@pytest.mark.parametrize("name", ["examples", "schedules", "sandbox", "remote"])
def test_the_walkthrough_runs_as_written(name, tmp_path):
    run_walkthrough(name, tmp_path)


@pytest.mark.browser
def test_the_browser_walkthrough_runs_as_written(tmp_path):
    from tests.support.browser_provider import need_chromium

    need_chromium()
    run_walkthrough("browser", tmp_path)


def test_the_production_walkthrough_runs_as_written_on_postgresql(tmp_path):
    admin = os.environ.get("DATABASE_URL", "")
    if not admin.startswith("postgres"):
        # CI's PostgreSQL pass runs it; the SQLite pass has no server to point it at.
        pytest.skip("needs PostgreSQL: run with DATABASE_URL=postgres://... (CI does)")
    import psycopg

    name = f"salvage_walkthrough_{uuid.uuid4().hex[:8]}"
    base, _, _db = admin.rpartition("/")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        out = run_walkthrough("production", tmp_path, DATABASE_URL=f"{base}/{name}")
        assert "salvage_tasks" in out
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
