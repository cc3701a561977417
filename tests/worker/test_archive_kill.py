"""A worker SIGKILLed while it re-extracts archived pages loses and duplicates nothing.

Re-extraction from the page archive commits through the engine's one fenced commit, so the
crash windows of seed 002 are the same as for fetched pages: killed after the extraction, inside
the commit's open transaction, or after COMMIT, the batch ends with each task committed once,
one observation per entity, and still no request to the site for an archived page.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from recovery.archive import pages
from recovery.models import Attempt, Observation, Task
from recovery.quality import reruns
from tests.support.engine_procs import Procs, log_text, wait_exit
from tests.support.page_archive import PAGES, load, paths, requested

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

BATCH = 3


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


@pytest.mark.parametrize("point", ["after_fetch", "in_commit", "after_commit"])
def test_a_worker_killed_while_re_extracting_loses_and_duplicates_nothing(
    point, broken_run, procs, settings
):
    shop, run, bad = broken_run
    assert len(bad) > BATCH, "the victim must die with pages left for the rescuer"
    load(2)
    before = requested(shop)
    batch = reruns.create_recovery_batch(
        run.pk,
        error_classes=["selector_failure"],
        reason="price selector repaired",
        scraper_version="2",
        actor="test",
        from_archive=True,
    )
    env = {"SALVAGE_ARTEFACT_DIR": str(settings.SALVAGE_ARTEFACT_DIR)}
    work = ("work", "--batch", str(BATCH), "--until-idle", "--worker-id")
    victim = procs.manage("victim", *work, "victim", SALVAGE_FAULT_POINT=point, **env)
    assert wait_exit(victim, 120, "the victim") == -signal.SIGKILL, log_text(victim)
    rescuer = procs.manage("rescuer", *work, "rescuer", **env)
    assert wait_exit(rescuer, 180, "the rescuer") == 0, log_text(rescuer)

    tasks = Task.objects.filter(recovery_batch=batch)
    assert Counter(tasks.values_list("state", flat=True)) == {"committed": len(bad)}
    attempts = Attempt.objects.filter(recovery_batch=batch)
    committed = Counter(attempts.filter(outcome="committed").values_list("task_id", flat=True))
    assert len(committed) == len(bad) and set(committed.values()) == {1}
    observations = Observation.objects.filter(run=run)
    assert observations.count() == PAGES
    assert observations.values("source_task_id").distinct().count() == PAGES
    # Version 2's prices: the redesign's negative "change since last week" is read by none.
    assert not any(str(o.payload["price"]).startswith("-") for o in observations)
    # Every page, the killed batch's included, came from the archive: none was requested (the
    # sandbox runs in this process, so its log holds the children's requests too).
    assert not paths(bad) & set(requested(shop) - before)
    assert pages.batch_sources(batch) == pages.Sources(archive=len(bad), fetched=0)
