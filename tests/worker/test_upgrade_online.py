"""An upgrade as docs/production.md ("Upgrade") writes it, under load, from the previous release.

The previous release's code is checked out from this repository's history (`git worktree
add` of PREVIOUS_RELEASE) and run with this checkout's virtualenv (the previous release's
dependencies are a subset of this one's; should a release drop or re-pin a package the
previous one needs, the old tree needs a virtualenv of its own here): it migrates a database of
its own, loads a dataset, freezes a run and starts two `work` processes on the sandbox shop.
Mid-run, this release's `manage.py migrate` runs while those old workers keep claiming and
committing (the expand step: old code on the new schema); then the old workers get SIGTERM
and this release's workers finish the run. Every task must end as the sandbox predicts, with
one observation per observed page and one committing attempt per committed task.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recovery.ops.processes import Supervisor, wait_until
from recovery.sandbox import robots as sandbox_robots
from tests.support.direct import SHOP_SPEC
from tests.support.engine_procs import ROOT, STALL
from tests.support.scratch_db import committed_count, open_tasks, run_end, scratch_database

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

# The last release that landed before the round that wrote this test (issue 27). Upgrading
# from it exercises every migration since; move it forward when a release is cut, so the
# test keeps upgrading from the release operators actually run.
PREVIOUS_RELEASE = "5a1b670"

PAGES = 1200
# The shop's robots.txt paces the previous release's workers (Crawl-delay: a page every
# 150 ms per process, ~13 pages a second for two), so the migration lands while they are still
# collecting; it is lifted before this release's workers start, and they finish quickly.
PACED = "User-agent: *\nCrawl-delay: 0.15\n"
UNPACED = "User-agent: *\nAllow: /\n"


def git(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=120, **kwargs
    )


@pytest.fixture
def previous_release(tmp_path) -> Iterator[Path]:
    """The previous release's tree, checked out beside this one; removed afterwards."""
    if git("cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}").returncode != 0:
        shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        pytest.skip(
            f"the previous release {PREVIOUS_RELEASE} is not in this checkout's history"
            + (" (a shallow clone: fetch with --unshallow)" if shallow else "")
        )
    tree = tmp_path / "previous"
    added = git("worktree", "add", "--detach", str(tree), PREVIOUS_RELEASE)
    assert added.returncode == 0, added.stderr
    try:
        yield tree
    finally:
        git("worktree", "remove", "--force", str(tree))
        git("worktree", "prune")


def release_env(database_url: str, data_dir: Path, sandbox_port: int) -> dict[str, str]:
    """The settings both releases read (recovery.settings, as production runs them)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SALVAGE_", "DJANGO_", "DATABASE_URL", "REDIS_URL", "SECRET_KEY"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="recovery.settings",
        DATABASE_URL=database_url,
        SALVAGE_INSECURE_DEV_KEY="1",
        SALVAGE_DATA_DIR=str(data_dir),
        SALVAGE_ALLOWED_NETWORKS=f"127.0.0.1:{sandbox_port}",
        SALVAGE_OUTBOX_WAKE="0",
        # Live workers compete: a lease must outlast a stall of the loaded box.
        SALVAGE_LEASE_SECONDS=str(STALL),
        SALVAGE_HEARTBEAT_SECONDS="1",
        # The sandbox's transient faults clear after a hit or two: retry quickly.
        SALVAGE_BACKOFF_BASE="0.05",
        SALVAGE_BACKOFF_CAP="0.5",
        PYTHONUNBUFFERED="1",
    )
    return env


def manage(tree: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        f"{tree.name}: manage.py {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def robots_answers(shop) -> list:
    """The sandbox's robots.txt answers (a list: the test swaps its text in place)."""
    assert shop.served is not None
    return shop.served._runner.app[sandbox_robots.ROBOTS]


def work_argv() -> list[str]:
    return [sys.executable, "manage.py", "work", "--batch", "10", "--concurrency", "4"]


def test_it_upgrades_under_load_from_the_previous_release_without_losing_or_repeating_a_task(
    postgres_only, previous_release, make_sandbox, tmp_path
):
    shop = make_sandbox(pages=PAGES, faults="mixed", seed=11, retry_after_seconds=1,
                        robots_txt=[PACED])  # fmt: skip
    summary = shop.summary()
    started = time.monotonic()

    def mark(what: str) -> None:  # phase times, in the captured output of a failure
        print(f"{time.monotonic() - started:6.1f} s  {what}")

    port = int(shop.base_url.rsplit(":", 1)[1])
    spec = tmp_path / "shop.json"
    spec.write_text(json.dumps({**SHOP_SPEC, "name": "upgrade"}))
    manifest = tmp_path / "shop.csv"
    manifest.write_text(
        "url,page_type\n" + "".join(f"{shop.product_url(i)},product\n" for i in range(1, PAGES + 1))
    )

    with scratch_database("upgrade") as url, Supervisor(grace=30, log_dir=tmp_path / "logs") as sup:
        env = release_env(url, tmp_path / "data", port)
        # Installed and collecting under the previous release.
        manage(previous_release, env, "migrate", "--noinput", "--verbosity", "0")
        manage(previous_release, env, "loaddataset", str(spec))
        created = manage(previous_release, env, "createrun", "upgrade", "--window",
                         "2026-12-01", "--manifest", str(manifest))  # fmt: skip
        run_id = int(created.strip().splitlines()[-1])
        mark("the previous release migrated, loaded and froze the run")
        old = [
            sup.start(f"old-work-{n}", work_argv(), env=env, cwd=previous_release) for n in (1, 2)
        ]
        wait_until(lambda: committed_count(url, run_id) >= 40, timeout=120,
                   what="the previous release's workers under way")  # fmt: skip

        # The new release's migrations, while the old workers run (docs/production.md).
        mark(f"{committed_count(url, run_id)} committed: migrating with this release")
        manage(ROOT, env, "migrate", "--noinput")
        migrated_at = committed_count(url, run_id)
        mark(f"migrated; {migrated_at} committed")
        assert all(p.alive() for p in old), "an old worker died during the migration"
        # The old code keeps committing on the new schema.
        wait_until(lambda: committed_count(url, run_id) >= migrated_at + 20, timeout=120,
                   what="the old workers committing after the migration")  # fmt: skip
        assert open_tasks(url, run_id) > 0, "the run ended before the switch: make it longer"

        for proc in old:
            proc.signal_group(signal.SIGTERM)
        for proc in old:
            assert sup.stop(proc.name) == 0, proc.log_path.read_text()[-3000:]
        shop.call(lambda: robots_answers(shop).__setitem__(0, UNPACED))
        mark(f"old workers stopped; {committed_count(url, run_id)} committed")
        new = [sup.start(f"new-work-{n}", work_argv(), env=env, cwd=ROOT) for n in (1, 2)]
        wait_until(lambda: open_tasks(url, run_id) == 0, timeout=240, interval=0.5,
                   what="the new release's workers finishing the run")  # fmt: skip
        mark("the run is done")
        for proc in new:
            assert sup.stop(proc.name) == 0, proc.log_path.read_text()[-3000:]
        end = run_end(url, run_id)

    wrong = []
    for i in range(1, PAGES + 1):
        expected = shop.expected(i)
        state, error = end.tasks[shop.product_url(i)]
        if state != expected.final_state or (
            state != "committed" and error != expected.error_class
        ):
            wrong.append((i, expected.kind, state, error))
    assert wrong == []
    assert len(end.tasks) == PAGES
    # No duplicate: one observation per observed page, each from its own task; each committed
    # task committed by exactly one attempt; no lease token served two attempts.
    assert end.observations == end.observation_tasks == summary["observations"]
    committed = sum(1 for state, _ in end.tasks.values() if state == "committed")
    assert len(end.committed_attempts) == committed
    assert set(end.committed_attempts.values()) == {1}
    assert end.reused_tokens == 0
    # Both releases did part of the run.
    pids = {"old": {p.pid for p in old}, "new": {p.pid for p in new}}
    by_release = {
        release: sum(n for worker, n in end.attempt_workers.items()
                     if any(f"-{pid}-" in worker for pid in group))
        for release, group in pids.items()
    }  # fmt: skip
    assert by_release["old"] > 0 and by_release["new"] > 0, by_release
    for proc in [*old, *new]:
        log = proc.log_path.read_text()
        assert "Traceback" not in log, log[-3000:]
