"""Seed 002's recovery drill in CI: real workers, real kills, every property must hold.

The drill runs as `manage.py drill --json` in a subprocess, on a scratch database of the same
kind as the suite's (a SQLite file, or a PostgreSQL database created beside DATABASE_URL's and
dropped afterwards), so it runs twice in CI: once per database.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from recovery.ops.processes import manage_py
from recovery.showroom.drill import PROPERTIES, SCENARIOS

pytestmark = [pytest.mark.worker, pytest.mark.slow]

TASKS = 2000
KILLS = 10


def drill_env(tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SALVAGE_INSECURE_DEV_KEY="1",
        DJANGO_SETTINGS_MODULE="recovery.settings",
        SALVAGE_DATA_DIR=str(tmp_path / "var"),
    )
    return env


def test_every_property_of_seed_002_holds_under_kills(tmp_path):
    argv = manage_py("drill", "--tasks", str(TASKS), "--kills", str(KILLS), "--seed", "7", "--json")
    on_postgres = os.environ.get("DATABASE_URL", "").startswith("postgres")
    if on_postgres:
        # Database outages too: the scratch database refuses connections and loses the
        # workers' backends for 3 s every 10 s of collection; the workers must ride them out.
        argv += ["--db-outage-every", "10", "--db-outage-seconds", "3"]
    proc = subprocess.run(
        argv, env=drill_env(tmp_path), capture_output=True, text=True, timeout=1500, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report = json.loads(lines[-1])

    failing = {n: f for n, f in report["properties"].items() if f.get("ok") is not True}
    assert not failing, json.dumps(failing, indent=1)
    assert set(PROPERTIES) <= set(report["properties"])
    harms = {n: report["scenarios"].get(n) for n in SCENARIOS}
    undone = {n: f for n, f in harms.items() if not (f and f.get("ok") is True)}
    assert not undone, json.dumps(undone, indent=1)

    assert report["tasks"] >= TASKS
    assert report["scenarios"]["collect"]["kills"] == KILLS  # at random moments, plus
    assert report["kills"] >= KILLS + 3  # the three crash windows
    assert report["lost"] == 0
    assert report["unexpected_final_states"] == 0
    # Random kills land on many pages: none comes near its crash budget (no crash loop).
    assert report["lost_lease_attempts"] >= 1
    assert report["crash_loops"] == 0
    assert 1 <= report["max_crash_count"] < 10
    if on_postgres:
        assert report["scenarios"]["collect"]["db_outages"] >= 1
        assert report["scenarios"]["collect"]["workers_exited_on_their_own"] == 0
    assert report["duplicate_observations"] == 0
    assert report["untraceable_attempts"] == 0
    assert report["stale_writes_accepted"] == 0
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_bad_input_exits_2_before_doing_anything(tmp_path):
    proc = subprocess.run(
        manage_py("drill", "--tasks", "5"),
        env=drill_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "--tasks" in proc.stderr
