"""Outbox crash windows on real processes (seed 002's table):

- after acceptance, before notification: the accepting process is SIGKILLed right after its
  COMMIT; the event waits in the outbox and is delivered once a delivery worker returns;
- after an uncertain destination write: the delivering process is SIGKILLed after the
  destination stored the event but before "delivered" was recorded; the next worker looks the
  key up and does not write it again (a naive, non-idempotent importer keeps one copy).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from recovery.models import OutboxEvent, Run
from recovery.quality import acceptance
from recovery.sandbox.destination import STATE_KEY, make_app
from recovery.sandbox.runner import start_in_thread
from recovery.states.choices import RunState
from tests.support.acceptance import make_collected_run

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent.parent


def database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


def manage(*args: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    child = {k: v for k, v in os.environ.items() if not k.startswith("SALVAGE_FAULT")}
    child.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database_url(),
        SALVAGE_INSECURE_DEV_KEY="1",
        SALVAGE_OUTBOX_WAKE="0",
        **env,
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child,
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )


def candidate() -> Run:
    run = make_collected_run({"a": "good"}, per_partition=3)
    acceptance.advance_runs()
    run.refresh_from_db()
    assert run.acceptance_state == RunState.CANDIDATE
    return run


def test_crash_after_acceptance_before_delivery_is_delivered_when_the_worker_returns(tmp_path):
    run = candidate()
    drop = tmp_path / "drop"
    dest = {"SALVAGE_DESTINATION": f"file://{drop}"}
    killed = manage("accept", str(run.pk), SALVAGE_FAULT_POINT="after_accept", **dest)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run.refresh_from_db()
    assert run.acceptance_state == RunState.ACCEPTED  # the COMMIT happened
    event = OutboxEvent.objects.get(run=run)
    assert event.state == "unsent" and event.attempts == 0
    assert not drop.exists()  # nothing was notified

    back = manage("deliver", "--until-idle", **dest)
    assert back.returncode == 0, back.stderr
    event.refresh_from_db()
    assert event.state == "delivered" and event.attempts == 1
    assert [p.name for p in drop.iterdir()] == [f"{event.pk}.json"]


def test_sender_killed_after_an_uncertain_write_is_looked_up_not_resent(settings):
    app = make_app(idempotent=False)
    served = start_in_thread(app)
    state = app[STATE_KEY]
    # An event keeps the destination it was written for (a lookup must ask the same place).
    settings.SALVAGE_DESTINATION = served.base_url
    settings.SALVAGE_OUTBOX_WAKE = False
    try:
        run = candidate()
        acceptance.accept_run(run.pk, "admin")
        event = OutboxEvent.objects.get(run=run)
        key = str(event.pk)
        assert event.destination == served.base_url
        dest = {"SALVAGE_DELIVERY_LEASE_SECONDS": "1"}

        killed = manage("deliver", "--until-idle", SALVAGE_FAULT_POINT="outbox_after_send", **dest)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        event.refresh_from_db()
        assert event.state == "sending" and event.attempts == 1
        assert state.records_for(key) == 1 and state.puts[key] == 1

        # The next worker waits for the dead sender's lease (a condition with a deadline). Each
        # round starts a process, which takes tens of seconds on a loaded box: 30 s allowed one.
        deadline = time.monotonic() + 180
        while True:
            back = manage("deliver", "--until-idle", **dest)
            assert back.returncode == 0, back.stderr
            event.refresh_from_db()
            if event.state == "delivered" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert event.state == "delivered" and event.attempts == 2
        assert state.lookups[key] == 1
        assert state.puts[key] == 1  # never written twice
        assert state.records_for(key) == 1
    finally:
        served.stop()


def test_production_path_the_dispatcher_and_a_qcluster_deliver_after_the_crash(tmp_path):
    """No wake-up was ever sent (the process died first): the dispatcher's tick sees the due
    event and wakes a django-q2 worker, which delivers it once."""
    from tests.support.engine_procs import Procs, wait_for

    run = candidate()
    drop = tmp_path / "drop"
    dest = {"SALVAGE_DESTINATION": f"file://{drop}", "SALVAGE_OUTBOX_SWEEP_SECONDS": "0.5"}
    killed = manage("accept", str(run.pk), SALVAGE_FAULT_POINT="after_accept", **dest)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    event = OutboxEvent.objects.get(run=run)
    assert event.state == "unsent"

    procs = Procs(tmp_path)
    try:
        env = {**dest, "SALVAGE_OUTBOX_WAKE": "0", "SALVAGE_Q_WORKERS": "1"}
        procs.manage("dispatch", "dispatch", **env)
        procs.manage("qcluster", "qcluster", **env)

        def delivered():
            event.refresh_from_db()
            return event.state == "delivered"

        # Two processes start and a sweep must come round: on a loaded box, 90 s was close.
        wait_for(delivered, timeout=240, what="the outbox event to be delivered")
    finally:
        procs.close()
    assert event.attempts == 1
    assert [p.name for p in drop.iterdir()] == [f"{event.pk}.json"]
