"""Re-extraction from the page archive (seed 002: "Rejected output should remain recoverable").

A run whose selector fails on one retailer's redesigned pages; spec version 2 repairs it; a
recovery batch "from the archive" re-extracts the stored pages: every repaired row commits,
the sandbox is not asked for any of them, and the rows equal what a refetch gives. A page whose
blob is gone (deleted, expired) is fetched, and counted as fetched.
"""

from __future__ import annotations

import os
import time

import pytest

from recovery import worker
from recovery.archive import pages, store
from recovery.models import Attempt, RecoveryBatch, Task
from recovery.quality import reruns
from tests.support.page_archive import PAGES, clear_log, load, paths, requested, rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_from_the_archive_re_extracts_without_a_request_and_equals_a_refetch(broken_run):
    shop, run, bad = broken_run
    load(2)
    clear_log(shop)
    batch = reruns.create_recovery_batch(
        run.pk,
        error_classes=["selector_failure"],
        reason="price selector repaired",
        scraper_version="2",
        actor="test",
        from_archive=True,
    )
    assert batch.task_count == len(bad)

    worker.run_until_idle("archive-batch", idle_wait=2.0)

    repaired = Task.objects.filter(recovery_batch=batch)
    assert set(repaired.values_list("state", flat=True)) == {"committed"}
    assert not paths(bad) & set(requested(shop)), "an archived page was requested again"
    assert pages.batch_sources(batch) == pages.Sources(archive=len(bad), fetched=0)
    attempts = Attempt.objects.filter(recovery_batch=batch)
    assert {a.artefact["archive"]["source"] for a in attempts} == {"archive"}
    assert {a.scraper_version for a in attempts} == {"2"}
    from_archive = rows(run)
    assert len(from_archive) == PAGES

    # The same tasks refetched by the same spec: the rows do not change by a byte.
    again = reruns.create_recovery_batch(
        run.pk,
        task_ids=list(repaired.values_list("pk", flat=True)),
        reason="compare with a refetch",
        scraper_version="2",
        actor="test",
    )
    worker.run_until_idle("archive-refetch", idle_wait=2.0)
    assert set(Task.objects.filter(recovery_batch=again).values_list("state", flat=True)) == {
        "committed"
    }
    assert paths(bad) <= set(requested(shop))
    assert pages.batch_sources(again) == pages.Sources(archive=0, fetched=len(bad))
    assert rows(run) == from_archive
    assert not RecoveryBatch.objects.get(pk=again.pk).from_archive


def test_a_page_whose_blob_is_gone_or_expired_is_fetched_and_counted_as_fetched(
    broken_run, settings
):
    shop, run, bad = broken_run
    deleted, expired, *kept = sorted(bad)
    blob = {
        t.url: a.artefact["archive"]["sha256"]
        for t in Task.objects.filter(run=run, url__in=bad)
        for a in Attempt.objects.filter(task=t)
    }
    store.path_for(blob[deleted]).unlink()
    old = time.time() - (settings.SALVAGE_ARCHIVE_DAYS + 1) * 86400
    os.utime(store.path_for(blob[expired]), (old, old))
    load(2)
    clear_log(shop)
    batch = reruns.create_recovery_batch(
        run.pk,
        error_classes=["selector_failure"],
        reason="price selector repaired",
        scraper_version="2",
        actor="test",
        from_archive=True,
    )

    worker.run_until_idle("archive-gone", idle_wait=2.0)

    assert set(Task.objects.filter(recovery_batch=batch).values_list("state", flat=True)) == {
        "committed"
    }
    log = requested(shop)
    assert paths([deleted, expired]) <= set(log)
    assert not paths(kept) & set(log)
    assert pages.batch_sources(batch) == pages.Sources(archive=len(kept), fetched=2)
    # The refetched pages are archived again: a later batch could re-extract them.
    for url in (deleted, expired):
        latest = Attempt.objects.filter(task__url=url, recovery_batch=batch).get()
        assert latest.artefact["archive"]["source"] == "fetched"
        assert store.get(latest.artefact["archive"]["sha256"]).url == url


@pytest.fixture
def small_archive_cap(settings):
    # Under the shop's 5 KB pages: nothing of the run is archived (set before broken_run runs).
    settings.SALVAGE_ARCHIVE_MAX_PAGE_BYTES = 1024


def test_a_page_over_the_archives_cap_is_not_kept_says_so_and_is_fetched(
    small_archive_cap, broken_run
):
    shop, run, bad = broken_run
    notes = [a.artefact["archive"] for a in Attempt.objects.filter(run=run)]
    assert len(notes) == PAGES
    assert all(
        "sha256" not in n and "over the archive's cap of 1024" in n["skipped"] for n in notes
    )
    load(2)
    clear_log(shop)
    batch = reruns.create_recovery_batch(
        run.pk,
        error_classes=["selector_failure"],
        reason="price selector repaired",
        scraper_version="2",
        actor="test",
        from_archive=True,
    )
    worker.run_until_idle("archive-cap", idle_wait=2.0)
    assert paths(bad) <= set(requested(shop))
    assert pages.batch_sources(batch) == pages.Sources(archive=0, fetched=len(bad))
