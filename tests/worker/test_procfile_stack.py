"""The Procfile runs the whole stack: honcho starts it on PostgreSQL with the production
settings, as docs/production.md ("Start", Procfile) says, and it collects, accepts, delivers,
makes a scheduled run and stops clean on SIGTERM.

What runs beside `work` matters: `work` alone never delivers an outbox event and never makes
a scheduled run. The Procfile's `deliver` and `dispatch --no-wakeups` do; this test fails if
either line goes (the delivery file or the scheduled run never appears).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone

from recovery.models import OutboxEvent, Run, Schedule, Task, WorkerHeartbeat
from recovery.ops.processes import Supervisor, free_port, http_ok, manage_py, wait_until
from tests.support.engine_procs import ROOT, child_env, database_url

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

PAGES = 150
METRICS_TOKEN = "procfile-metrics-token-3b7d"


def production_env(tmp_path, sandbox_port: int) -> dict[str, str]:
    """docs/production.md's settings (deploy/env.example), pointed at the test database."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SALVAGE_", "DJANGO_", "DATABASE_URL", "REDIS_URL", "SECRET_KEY"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="recovery.settings",
        DATABASE_URL=database_url(),
        SECRET_KEY="procfile-stack-secret-key-8e41c0d2a9",
        ALLOWED_HOSTS="127.0.0.1",
        SALVAGE_BEHIND_PROXY="1",
        SALVAGE_DATA_DIR=str(tmp_path / "data"),
        SALVAGE_LOG_FORMAT="json",
        SALVAGE_METRICS_TOKEN=METRICS_TOKEN,
        SALVAGE_DESTINATION=f"file://{tmp_path / 'outbox'}",
        SALVAGE_OUTBOX_WAKE="0",
        SALVAGE_ALLOWED_NETWORKS=f"127.0.0.1:{sandbox_port}",
        SALVAGE_SCHEDULE_CHECK_SECONDS="0.5",
        PYTHONUNBUFFERED="1",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        manage_py(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def get(url: str, **headers: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"X-Forwarded-Proto": "https", **headers})
    with urllib.request.urlopen(request, timeout=20) as response:
        return response.status, response.read()


def test_honcho_runs_the_procfile_stack_to_an_accepted_delivered_export(postgres_only, tmp_path):
    sandbox_port, web_port = free_port(), free_port()
    env = production_env(tmp_path, sandbox_port)
    spec, manifest = tmp_path / "shop.toml", tmp_path / "shop.csv"
    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        supervisor.start(
            "sandbox",
            manage_py("sandbox", "--port", str(sandbox_port), "--pages", str(PAGES),
                      "--spec-out", str(spec), "--manifest-out", str(manifest)),
            env=child_env(),
        )  # fmt: skip
        wait_until(lambda: manifest.exists() and manifest.stat().st_size, timeout=60,
                   what="the sandbox")  # fmt: skip

        # The one-shot steps of docs/production.md, before the processes start.
        manage(env, "migrate", "--noinput", "--verbosity", "0")
        manage(env, "collectstatic", "--noinput", "--verbosity", "0")
        passwords = tmp_path / "passwords"
        passwords.write_text("admin:adm-Pw-0a9c3e71\noperator:op-Pw-5d2b8f14\nexporter:ex-Pw-7e6a")
        manage(env, "createusers", "--password-file", str(passwords))
        manage(env, "loaddataset", str(spec))
        created = manage(env, "createrun", "sandbox-shop", "--window", "2026-12-01",
                         "--manifest", str(manifest))  # fmt: skip
        run_id = int(created.strip().splitlines()[-1])
        # A daily schedule whose window for today is due already (made yesterday).
        scheduled = tmp_path / "scheduled.csv"
        scheduled.write_text("".join(manifest.read_text().splitlines(keepends=True)[:21]))
        manage(env, "schedule", "add", "sandbox-shop", "daily", "--daily", "00:00",
               "--tz", "UTC", "--manifest", str(scheduled))  # fmt: skip
        Schedule.objects.update(created_at=timezone.now() - timedelta(days=1))

        empty_env_file = tmp_path / "honcho.env"  # a developer's ./.env must not leak in
        empty_env_file.write_text("")
        # honcho as `honcho start` runs it, except for its SIGKILL 5 s after the SIGTERM: a
        # loaded CI box can take longer than that to drain, and this test judges our
        # processes' own exit, not honcho's patience (docs/production.md says it is 5 s).
        honcho_main = (
            "import sys, honcho.manager, honcho.command; honcho.manager.KILL_WAIT = 60; "
            "sys.argv[0] = 'honcho'; honcho.command.main()"
        )
        honcho = supervisor.start(
            "honcho",
            [sys.executable, "-c", honcho_main, "start", "--no-colour", "-f", "Procfile",
             "-e", str(empty_env_file), "-p", str(web_port), "-c", "work=2"],
            env=env,
            cwd=ROOT,
        )  # fmt: skip
        web = f"http://127.0.0.1:{web_port}"
        wait_until(lambda: http_ok(f"{web}/healthz"), timeout=90, what="gunicorn via honcho")

        def state(pk: int) -> str:
            return Run.objects.filter(pk=pk).values_list("acceptance_state", flat=True)[0]

        wait_until(lambda: state(run_id) == "candidate", timeout=300, interval=0.5,
                   what="the run to become a candidate")  # fmt: skip
        manage(env, "accept", str(run_id))
        assert state(run_id) == "accepted"
        # `deliver` sends the acceptance's outbox event to the file destination.
        wait_until(
            lambda: OutboxEvent.objects.filter(run_id=run_id, state="delivered").exists(),
            timeout=120,
            what="the outbox delivery",
        )
        assert any((tmp_path / "outbox").iterdir())
        # `dispatch --no-wakeups` made today's scheduled run, and `work` collected it.
        scheduled_run = wait_until(
            lambda: Run.objects.exclude(pk=run_id).first(), timeout=60, what="a scheduled run"
        )
        assert scheduled_run.window == timezone.now().strftime("%Y-%m-%d")
        wait_until(
            lambda: state(scheduled_run.pk) == "candidate", timeout=120, what="its collection"
        )

        exported = tmp_path / "export.csv"
        manage(env, "export", str(run_id), "--format", "csv", "--output", str(exported))
        rows = exported.read_text().splitlines()
        assert len(rows) - 1 == Task.objects.filter(run_id=run_id, state="committed").count()
        assert len(rows) - 1 >= PAGES * 0.9

        # Verify as the guide says: readiness and metrics through gunicorn.
        assert json.loads(get(f"{web}/readyz")[1]) == {"status": "ready"}
        status, body = get(f"{web}/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
        assert status == 200 and b"salvage_workers_alive" in body

        honcho.popen.send_signal(signal.SIGTERM)
        assert honcho.popen.wait(timeout=60) == 128 + signal.SIGTERM  # honcho's own code

    log = (tmp_path / "logs" / "honcho.log").read_text()
    stopped = dict(re.findall(r"\| ([a-z]+(?:\.\d+)?) stopped \(rc=(-?\d+)\)", log))
    assert stopped == {
        "web.1": "0", "work.1": "0", "work.2": "0", "dispatch.1": "0", "deliver.1": "0"
    }, log[-3000:]  # fmt: skip
    assert not Task.objects.filter(state="leased").exists()
    assert set(Task.objects.values_list("state", flat=True)) <= {
        "committed", "gone", "quarantined", "dead",
    }  # fmt: skip
    # Each loop recorded its clean stop (a killed one would not have).
    beats = WorkerHeartbeat.objects.filter(kind__in=["work", "dispatch", "deliver"])
    assert beats.count() == 4 and not beats.filter(stopped_at__isnull=True).exists()
    assert "Traceback" not in log, log[-3000:]
