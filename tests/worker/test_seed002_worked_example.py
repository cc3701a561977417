"""Seed 002's worked example end to end, on real worker processes and the sandbox shop.

One retailer's price selector produces invalid prices (the shop's bad-retailer overlay). The
run is collected by `manage.py work`, the partition rule quarantines that retailer and
acceptance is refused; the "selector" is repaired (the overlay switched off), a recovery batch
reruns exactly that retailer's task keys with new attempts, the run is revalidated and
accepted, and the other retailers' observations hash exactly as before.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.db import connection

from recovery.delivery import exports
from recovery.models import Attempt, Observation, RecoveryBatch, Run, RunPartition
from recovery.quality import acceptance, reruns
from recovery.sandbox import server, site
from recovery.sandbox.runner import start_in_thread
from recovery.states import row_states
from recovery.states.choices import RunState

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent.parent
PAGES = 60


def database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "postgresql":
        auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
        return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    return f"sqlite:///{s['NAME']}"


def work_until_idle() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SALVAGE_FAULT")}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database_url(),
        SALVAGE_INSECURE_DEV_KEY="1",
        SALVAGE_OUTBOX_WAKE="0",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "work", "--until-idle", "--idle-wait", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def shop():
    served = start_in_thread(server.build_app(pages=PAGES, faults="bad_retailer", simulators={}))
    yield served
    served.stop()


def test_quarantine_repair_revalidate_promote_on_real_workers(shop, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(server.shop_spec_toml(name="worked-example"))
    manifest = tmp_path / "manifest.csv"
    server.write_manifest(manifest, server.manifest_rows(shop.base_url, pages=PAGES))
    call_command("loaddataset", str(spec), stdout=io.StringIO())
    out = io.StringIO()
    call_command(
        "createrun", "worked-example", "--window", "w1", "--manifest", str(manifest), stdout=out
    )
    run = Run.objects.get(pk=int(out.getvalue().strip().splitlines()[-1]))
    bad = site.bad_retailer_for()

    work_until_idle()  # collects, then (idle check) makes the candidate and evaluates it
    run.refresh_from_db()
    assert run.acceptance_state == RunState.CANDIDATE
    held = RunPartition.objects.get(run=run, name=bad)
    assert held.quarantined and "partition_invalid_prices" in held.quarantine_reason
    # Its rows are held by the quarantine (each keeps its own verdict): none is exportable.
    bad_rows = Observation.objects.filter(run=run, partition=bad)
    assert bad_rows.exists()
    assert not row_states.exportable(run.pk).filter(partition=bad).exists()
    assert row_states.state_counts(run.pk)["held"] == bad_rows.count()
    with pytest.raises(acceptance.AcceptanceError, match="coverage"):
        acceptance.accept_run(run.pk, "admin")
    keys_before = set(Observation.objects.filter(run=run).values_list("observation_key", flat=True))
    attempts_before = Attempt.objects.filter(run=run).count()

    # Repair the selector (the shop stops serving the bad prices) and rerun that retailer only.
    httpx.post(f"{shop.base_url}/_sandbox/faults", json={"bad_retailer": False}).raise_for_status()
    call_command(
        "rerun",
        str(run.pk),
        "--rule",
        "partition_invalid_prices",
        "--reason",
        "price selector repaired",
        "--scraper-version",
        "2",
        stdout=io.StringIO(),
    )
    batch = RecoveryBatch.objects.get(run=run)
    assert batch.selection["touched_partitions"] == [bad]
    assert bad not in batch.partition_hashes_before and batch.partition_hashes_before

    work_until_idle()  # reruns the batch, completes it, revalidates, candidate again
    batch.refresh_from_db()
    run.refresh_from_db()
    assert batch.state == "completed"
    assert run.acceptance_state == RunState.CANDIDATE
    assert not RunPartition.objects.get(run=run, name=bad).quarantined
    new_attempts = Attempt.objects.filter(run=run).count() - attempts_before
    assert new_attempts == batch.task_count
    assert Attempt.objects.filter(recovery_batch=batch).count() == batch.task_count

    call_command("accept", str(run.pk), stdout=io.StringIO())
    run.refresh_from_db()
    assert run.acceptance_state == RunState.ACCEPTED
    assert (
        set(Observation.objects.filter(run=run).values_list("observation_key", flat=True))
        == keys_before
    )
    assert all(reruns.untouched_unchanged(batch).values())
    rows = "".join(exports.stream(run.pk, "jsonl")).splitlines()
    assert len(rows) == len(keys_before)
