"""The backup drill of docs/production.md ("Back up", "Restore"), mid-run, on real processes.

Two `work` processes collect a sandbox run on the test database while `manage.py backup`
runs; the backup is restored with `manage.py restore` into a new database and a new data
directory, and two `work` processes resume the run there. Nothing committed before the
backup is lost or changed, the run ends as the sandbox predicts with no task done twice, and
an accepted run's kept export file and a failed page's artefact open from the restored
directory. The command's refusals (a target that is not empty, a damaged backup, SQLite) are
checked too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from recovery.delivery import export_files
from recovery.fetch import artefacts
from recovery.models import Attempt, Observation, Run
from recovery.ops.processes import Supervisor, manage_py, wait_until
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run
from tests.support.direct import create_run, load_shop
from tests.support.engine_procs import ROOT, STALL, child_env
from tests.support.scratch_db import committed_count, fetch, open_tasks, run_end, scratch_database

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

# Long enough that pg_dump's snapshot, taken a few seconds after 60 pages committed, finds
# the run mid-way (checked on the restored database before it resumes).
PAGES = 1500
PNG = b"\x89PNG\r\n\x1a\n" + b"backup-drill-screenshot" * 40


def manage(env: dict[str, str], *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run(
        manage_py(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == expect, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def worker_env(database_url: str, data_dir) -> dict[str, str]:
    return child_env(
        DATABASE_URL=database_url,
        SALVAGE_DATA_DIR=str(data_dir),
        SALVAGE_LEASE_SECONDS=str(STALL),  # two live workers: a lease outlasts a stall
        SALVAGE_BACKOFF_BASE="0.05",
        SALVAGE_BACKOFF_CAP="0.5",
        SALVAGE_OUTBOX_WAKE="0",
    )


def work(
    supervisor: Supervisor, name: str, env: dict[str, str], *, batch: int = 10, concurrency: int = 4
):
    argv = manage_py("work", "--batch", str(batch), "--concurrency", str(concurrency))
    return supervisor.start(name, argv, env=env, cwd=ROOT)


def test_it_restores_a_mid_run_backup_into_a_new_database_and_data_directory_and_resumes(
    postgres_only, make_sandbox, tmp_path, settings
):
    source_data, restored_data, backup_dir = (tmp_path / d for d in ("data", "restored", "bk"))
    settings.DATA_DIR = source_data
    settings.SALVAGE_ARTEFACT_DIR = source_data / "artefacts"
    settings.SALVAGE_EXPORT_CACHE_DIR = source_data / "export-cache"
    # An accepted run whose CSV export is kept as a file (the API's downloads), and a failed
    # page's screenshot named by one of its attempts.
    accepted = make_collected_run({"a": "good", "b": "good"}, per_partition=5)
    acceptance.advance_runs()
    acceptance.accept_run(accepted.pk, "admin")
    accepted = Run.objects.get(pk=accepted.pk)
    kept = export_files.materialise(accepted, "csv", export_files.identity(accepted, "csv"))
    screenshot = artefacts.store(PNG, "png")
    Attempt.objects.filter(pk=Attempt.objects.filter(run=accepted).first().pk).update(
        artefact={"screenshot": screenshot}
    )

    shop = make_sandbox(pages=PAGES, faults="gone", seed=5)
    load_shop("backup")
    run = create_run("backup", [(shop.product_url(i), "product") for i in range(1, PAGES + 1)],
                     tmp_path)  # fmt: skip
    started = time.monotonic()

    def mark(what: str) -> None:  # phase times, in the captured output of a failure
        print(f"{time.monotonic() - started:6.1f} s  {what}")

    source_env = worker_env(child_env()["DATABASE_URL"], source_data)

    with Supervisor(grace=30, log_dir=tmp_path / "logs") as supervisor:
        # Small batches, few pages at once: the backup lands well before the run ends.
        source = [
            work(supervisor, f"source-work-{n}", source_env, batch=5, concurrency=2) for n in (1, 2)
        ]
        wait_until(lambda: committed_count(child_env()["DATABASE_URL"], run.pk) >= 60,
                   timeout=120, what="the run under way")  # fmt: skip
        before = dict(
            Observation.objects.filter(run=run).values_list("observation_key", "payload_hash")
        )
        mark(f"{len(before)} observations: backing up")
        manage(source_env, "backup", str(backup_dir))  # while the workers commit
        mark("backed up")
        assert all(p.alive() for p in source)
        for proc in source:
            assert supervisor.stop(proc.name) == 0, proc.log_path.read_text()[-3000:]

        manifest = json.loads((backup_dir / "manifest.json").read_text())
        assert manifest["database"]["bytes"] == (backup_dir / "database.dump").stat().st_size
        assert manifest["files"]["bytes"] == (backup_dir / "files.tar.gz").stat().st_size
        assert manifest["files"]["entries"] >= 2  # the export file and the screenshot
        assert manifest["migrations"]["recovery"][0] == "0001_initial"

        with scratch_database("restored") as url:
            manage(source_env, "restore", str(backup_dir), "--database-url", url,
                   "--data-dir", str(restored_data))  # fmt: skip
            # Restored twice is refused: the database and the data directory are not empty.
            refused = manage(source_env, "restore", str(backup_dir), "--database-url", url,
                             "--data-dir", str(tmp_path / "other"), expect=2)  # fmt: skip
            assert "has tables: restore into a new, empty database" in refused.stderr
            mark("restored")
            assert open_tasks(url, run.pk) > 0, "the backup found the run ended: make it longer"
            assert committed_count(url, run.pk) >= len(before)
            restored_env = worker_env(url, restored_data)
            resumed = [work(supervisor, f"restored-work-{n}", restored_env) for n in (1, 2)]
            wait_until(lambda: open_tasks(url, run.pk) == 0, timeout=240, interval=0.5,
                       what="the restored workers finishing the run")  # fmt: skip
            mark("the restored run is done")
            for proc in resumed:
                assert supervisor.stop(proc.name) == 0, proc.log_path.read_text()[-3000:]
            end = run_end(url, run.pk)
            after = dict(
                fetch(url, "SELECT observation_key, payload_hash FROM recovery_observation "
                      "WHERE run_id = %s", [run.pk])
            )  # fmt: skip
            named = fetch(url, "SELECT artefact FROM recovery_attempt WHERE run_id = %s "
                          "AND artefact::text LIKE '%%screenshot%%'", [accepted.pk])  # fmt: skip
            exported = tmp_path / "restored-export.csv"
            manage(restored_env, "export", str(accepted.pk), "--format", "csv",
                   "--output", str(exported))  # fmt: skip

    # Nothing committed before the backup is lost or changed.
    assert before and all(after.get(key) == digest for key, digest in before.items())
    # The run ends as the sandbox predicts, each task once.
    summary = shop.summary()
    wrong = [
        (i, shop.expected(i).kind, end.tasks[shop.product_url(i)])
        for i in range(1, PAGES + 1)
        if end.tasks[shop.product_url(i)][0] != shop.expected(i).final_state
    ]
    assert wrong == []
    assert end.observations == end.observation_tasks == summary["observations"]
    assert set(end.committed_attempts.values()) == {1}
    assert len(end.committed_attempts) == summary["final_states"]["committed"]
    assert end.reused_tokens == 0
    # The kept export and the screenshot open from the restored data directory.
    restored_kept = restored_data / "export-cache" / kept.name
    assert restored_kept.read_bytes() == kept.read_bytes() == exported.read_bytes()
    assert named == [({"screenshot": screenshot},)]
    settings.SALVAGE_ARTEFACT_DIR = restored_data / "artefacts"
    assert artefacts.read_screenshot(screenshot) == PNG


def test_it_refuses_a_damaged_backup_a_used_directory_and_a_foreign_database(
    postgres_only, tmp_path
):
    env = child_env(SALVAGE_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "data" / "manifests").mkdir(parents=True)
    (tmp_path / "data" / "manifests" / "shop.csv").write_text("url\nhttp://a.test/1\n")
    backup_dir = tmp_path / "bk"
    done = manage(env, "backup", str(backup_dir))
    assert done.stdout.startswith(f"backup {backup_dir}: database postgresql ")
    again = manage(env, "backup", str(backup_dir), expect=2)
    assert "not an empty directory (a backup never overwrites)" in again.stderr
    sqlite_url = f"sqlite:///{tmp_path / 'restored.sqlite3'}"
    foreign = manage(env, "restore", str(backup_dir), "--database-url", sqlite_url,
                     "--data-dir", str(tmp_path / "r1"), expect=2)  # fmt: skip
    assert "the backup is of a postgresql database; --database-url names a sqlite one" in (
        foreign.stderr
    )
    with (backup_dir / "files.tar.gz").open("r+b") as fh:
        fh.seek(20)
        fh.write(b"\0\0\0\0")
    with scratch_database("refused") as url:
        damaged = manage(env, "restore", str(backup_dir), "--database-url", url,
                         "--data-dir", str(tmp_path / "r2"), expect=2)  # fmt: skip
        assert "its SHA-256 is not the manifest's" in damaged.stderr
        assert fetch(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]
    assert not (tmp_path / "r2").exists()


def test_it_backs_up_and_restores_sqlite_with_the_online_backup_api(tmp_path):
    database = tmp_path / "live.sqlite3"
    env = child_env(DATABASE_URL=f"sqlite:///{database}", SALVAGE_DATA_DIR=str(tmp_path / "data"))
    manage(env, "migrate", "--noinput", "--verbosity", "0")
    manage(env, "createusers", "--admin", "ada", "--password-file", str(_passwords(tmp_path)))
    manage(env, "backup", str(tmp_path / "bk"))
    restored = tmp_path / "restored.sqlite3"
    manage(env, "restore", str(tmp_path / "bk"), "--database-url", f"sqlite:///{restored}",
           "--data-dir", str(tmp_path / "restored-data"))  # fmt: skip
    check = subprocess.run(
        [sys.executable, "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
         "\"SELECT username FROM auth_user WHERE username = 'ada'\").fetchall())", str(restored)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.stdout.strip() == "[('ada',)]", check.stderr


def _passwords(tmp_path):
    path = tmp_path / "passwords"
    path.write_text(
        "ada:backup-Drill-Pw-4c1e9b\noperator:backup-Drill-Pw-77d0a2\nexporter:backup-Drill-Pw-90ce13\n"
    )
    return path
