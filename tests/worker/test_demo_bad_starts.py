"""Bad starts of `manage.py demo` end with one line saying what is wrong and what to do.

Each case runs the real command in a subprocess (the same entry point `make demo` uses) and
checks the exit code (2: bad input) and the message, and that no traceback is shown.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from recovery.ops.processes import free_port, manage_py

pytestmark = [pytest.mark.worker]


def demo(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SALVAGE_DATA_DIR")}
    base.update(SALVAGE_INSECURE_DEV_KEY="1", DJANGO_SETTINGS_MODULE="recovery.settings", **env)
    return subprocess.run(
        manage_py("demo", "--no-browser-open", *args),
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_refuses_a_data_dir_that_is_a_file_in_one_line(tmp_path):
    in_the_way = tmp_path / "var"
    in_the_way.write_text("not a directory")
    done = demo("--data-dir", str(in_the_way), "--port", "0")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"data directory {in_the_way}" in lines[0]
    assert "a file is in the way" in lines[0]
    assert in_the_way.read_text() == "not a directory"  # nothing of the user's is touched


def test_it_names_a_busy_port_and_the_flag_to_change_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = demo("--data-dir", str(tmp_path / "missing" / "var"), "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"port {port} is taken" in done.stderr
    assert "--port N" in done.stderr and "DEMO_PORT=N" in done.stderr


def test_it_says_what_to_install_when_postgresql_is_unreachable(tmp_path):
    port = free_port()  # nothing listens there
    done = demo(
        "--data-dir",
        str(tmp_path / "var"),
        "--port",
        "0",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/salvage",
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot reach PostgreSQL at 127.0.0.1" in done.stderr
    assert "apt-get install postgresql" in done.stderr
    assert "unset DATABASE_URL" in done.stderr


def test_it_creates_a_missing_data_directory(tmp_path):
    # A command that needs the database creates the directory tree it lives in.
    data_dir = tmp_path / "not" / "yet" / "there"
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    base.update(SALVAGE_INSECURE_DEV_KEY="1", SALVAGE_DATA_DIR=str(data_dir))
    done = subprocess.run(
        manage_py("migrate", "--verbosity", "0"), env=base, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (data_dir / "salvage.sqlite3").is_file()
