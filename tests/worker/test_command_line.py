"""manage.py as an operator meets it on a new host: help without a secret key, and one line
(not a 60-90 line traceback) when the database does not answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from recovery.ops.processes import free_port
from tests.support.engine_procs import ROOT

pytestmark = [pytest.mark.worker]

# The one-shot commands an operator scripts (docs/production.md), with valid arguments.
ONE_SHOT = [
    ["migrate"],
    ["loaddataset", "examples/shop.toml"],
    ["runstatus", "1"],
    ["createrun", "shop", "--window", "2026-11-29", "--manifest", "examples/shop-manifest.csv"],
    ["export", "1", "--format", "csv"],
    ["accept", "1"],
    ["createusers", "--password-file", "/dev/null"],
]


def bare_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh host: no key, no dev switch, no test settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SALVAGE_", "DJANGO_", "DATABASE_URL", "SECRET_KEY", "DEBUG"))
    }
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_help_and_every_commands_help_need_no_secret_key(tmp_path):
    env = bare_env(SALVAGE_DATA_DIR=str(tmp_path))
    listed = manage("help", "--commands", env=env)
    assert listed.returncode == 0, listed.stderr
    commands = listed.stdout.split()
    assert {"work", "createusers", "createrun", "migrate", "clearsessions"} <= set(commands)
    assert manage("help", env=env).returncode == 0
    work = manage("work", "--help", env=env)
    assert work.returncode == 0 and "--until-idle" in work.stdout, work.stderr
    assert manage("--version", env=env).returncode == 0
    # Every command's --help, each as its own command line, in one interpreter: Django's
    # ManagementUtility as manage.py runs it, settings loaded the way a help line loads them.
    script = (
        "import sys\n"
        "sys.argv = ['manage.py', 'help']\n"
        "import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'recovery.settings'\n"
        "from django.core.management import execute_from_command_line\n"
        "failed = []\n"
        f"for name in {commands!r}:\n"
        "    sys.argv = ['manage.py', name, '--help']\n"
        "    try:\n"
        "        execute_from_command_line(sys.argv)\n"
        "    except SystemExit as exc:\n"
        "        if exc.code: failed.append(name)\n"
        "print('FAILED', failed)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "FAILED []" in done.stdout, done.stdout[-2000:] + done.stderr
    assert done.stdout.count("usage: manage.py ") == len(commands)


def test_serving_and_working_still_need_a_secret_key(tmp_path):
    env = bare_env(SALVAGE_DATA_DIR=str(tmp_path))
    for args in (["work", "--until-idle"], ["migrate"], ["check", "--deploy"]):
        done = manage(*args, env=env)
        assert done.returncode == 2, args
        assert done.stderr.strip().splitlines() == [
            "manage.py: SECRET_KEY must be set when DEBUG is off "
            "(the demo and tests set DEBUG=1 or SALVAGE_INSECURE_DEV_KEY=1)"
        ]
    wsgi = subprocess.run(
        [sys.executable, "-c", "import recovery.wsgi"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "recovery.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wsgi.returncode != 0 and "SECRET_KEY must be set" in wsgi.stderr


@pytest.mark.parametrize("args", ONE_SHOT, ids=lambda args: args[0])
def test_an_unreachable_database_is_one_line_and_exit_1(args, tmp_path):
    port = free_port()  # nothing listens there
    env = bare_env(
        SECRET_KEY="command-line-test-key",
        SALVAGE_DATA_DIR=str(tmp_path),
        DATABASE_URL=f"postgres://salvage:pw-never-shown-9c1e@127.0.0.1:{port}/salvage",
    )
    done = manage(*args, env=env)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(lines) == 1, "\n".join(lines)
    line = lines[0]
    assert line.startswith(f"{args[0]}: cannot reach the database ")
    assert f"postgresql salvage@127.0.0.1:{port}/salvage" in line
    assert "refused" in line.lower()
    assert "pw-never-shown-9c1e" not in line


def test_a_commands_audit_entries_name_the_operating_system_user(tmp_path):
    # Issue 29: what an operator does from a shell is audited as them (getpass reads LOGNAME
    # first), not as `system`: the one spelling is `cli:<user>`.
    env = bare_env(
        SALVAGE_DATA_DIR=str(tmp_path), SALVAGE_INSECURE_DEV_KEY="1", LOGNAME="alice", USER="alice"
    )
    for args in ONE_SHOT[:2] + ONE_SHOT[3:4]:  # migrate, loaddataset, createrun
        done = manage(*args, env=env)
        assert done.returncode == 0, (args, done.stderr[-2000:])
    query = (
        "import json; from recovery.models import AuditEntry as A; "
        "print(json.dumps(dict(A.objects.values_list('action', 'actor'))))"
    )
    done = manage("shell", "-c", query, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    entries = json.loads(done.stdout.splitlines()[-1])  # {action: actor}
    assert entries["run_created"] == "cli:alice"
    assert {actor for actor in entries.values()} == {"cli:alice"}
