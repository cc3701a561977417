"""Sitemap discovery survives a SIGKILLed worker: the finished sitemap files are not fetched
again (the sandbox's own request log says so) and no URL becomes two tasks.

The victim reads one file per batch and is killed after its third fetch, before that commit:
the index and one file are committed, one file is leased by a dead process, one is pending
(pipelined, the third fetch may find the previous commit still running: see the test).
A second worker finishes discovery and is stopped once every sitemap file is final (the pages
it found are not the point here, and 50,000 of them would be slow).
"""

from __future__ import annotations

import signal
from collections import Counter
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.db.models import Count

from recovery.fetch import sitemaps
from recovery.models import Attempt, Task
from recovery.sandbox import robots as sandbox_robots
from recovery.sandbox import sitemaps as sandbox_sitemaps
from tests.support.direct import create_run, load_shop
from tests.support.engine_procs import Procs, log_text, wait_exit, wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

FINAL = ("committed", "quarantined", "gone", "dead")


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def test_a_killed_discovery_resumes_without_fetching_finished_files_again(
    make_sandbox,
    procs,
    tmp_path,
):
    shop = make_sandbox(pages=30, faults="none")
    load_shop(
        "smkill",
        sitemap={"url": shop.url("/sitemap_index.xml"), "page_type": "product"},
        # The shop spec's 2 s deadline is for its slow pages; a 5 MB sitemap needs more.
        provider_options={"deadline": 30.0, "read_timeout": 15.0},
    )
    run = create_run("smkill", [(shop.product_url(3), "product")], tmp_path)
    files = Task.objects.filter(run=run, page_type=sitemaps.SITEMAP_PAGE_TYPE)

    victim = procs.manage(
        "victim",
        "work",
        "--until-idle",
        "--batch",
        "1",
        "--concurrency",
        "1",
        "--worker-id",
        "victim",
        SALVAGE_FAULT_POINT="after_fetch",
        SALVAGE_FAULT_SKIP="2",
    )
    assert wait_exit(victim, 120, "the victim") == -signal.SIGKILL, log_text(victim)[-3000:]
    left = Counter(files.values_list("state", flat=True))
    # Killed mid-discovery: the index and a file committed, one file held by the dead worker.
    # Pipelined (PostgreSQL, recovery.commit_lane), the previous file's commit may still have
    # been running when the kill came: then it died with it, and that file is held too.
    pipelined = connection.vendor == "postgresql"
    held = (1, 2) if pipelined else (1,)
    assert left["committed"] >= 3 - len(held) and left["leased"] in held, left
    assert sum(left.values()) == 4, left
    finished = {urlsplit(t.url).path for t in files.filter(state="committed")}
    killed = {urlsplit(t.url).path for t in files.filter(state="leased")}

    rescuer = procs.manage("rescuer", "work", "--batch", "20", "--worker-id", "rescuer")
    wait_for(
        lambda: not files.exclude(state__in=FINAL).exists(),
        timeout=180,
        what="every sitemap file final",
    )
    assert procs.stop(rescuer) == 0, log_text(rescuer)[-3000:]

    assert set(files.values_list("state", flat=True)) == {"committed"}
    assert files.count() == 4
    log = Counter(shop.served._runner.app[sandbox_robots.REQUESTS])
    assert "/sitemap_index.xml" in finished
    for task in files:
        path = urlsplit(task.url).path
        attempts = Attempt.objects.filter(task=task)
        # The server's word: one request per attempt (a timeout's retry is an attempt) ...
        assert log[path] == attempts.count(), (path, log[path])
        if path in finished:
            # ... and what the victim committed was never fetched again.
            assert not attempts.filter(worker="rescuer").exists(), path
    # The files it died holding were fetched again (so the log does count repeats).
    assert all(log[path] >= 2 for path in killed), {path: log[path] for path in killed}
    # Each file committed exactly once, by whoever held its lease.
    committed = Counter(
        Attempt.objects.filter(task__in=files, outcome="committed").values_list(
            "task_id", flat=True
        )
    )
    assert set(committed.values()) == {1} and len(committed) == 4
    # No URL is two tasks: big.xml's 50,000 include the product files' and the manifest's.
    products = Task.objects.filter(run=run, page_type="product")
    assert products.count() == sandbox_sitemaps.BIG
    assert {row["n"] for row in products.values("url").annotate(n=Count("id"))} == {1}
    assert products.get(url=shop.product_url(3)).discovery == "manifest"
