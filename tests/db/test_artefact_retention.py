"""pruneartefacts: which triage files go (published long ago, orphans) and which stay."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from recovery.fetch import artefacts
from recovery.states.choices import RunState
from tests.support.browser_provider import screenshot_attempt, tiny_png
from tests.support.factories import make_run, make_tasks


@pytest.fixture
def folder(db, settings, tmp_path):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    return settings.SALVAGE_ARTEFACT_DIR


def _attempt_on(run, size):
    task = make_tasks(run, 1)[0]
    return screenshot_attempt(task, tiny_png(size, size)).artefact["screenshot"]


def _age(path, minutes):
    then = time.time() - minutes * 60
    os.utime(path, (then, then))


def test_it_removes_old_published_runs_files_and_old_orphans_only(folder, capsys):
    old = make_run(acceptance_state=RunState.PUBLISHED)
    old.published_at = timezone.now() - timedelta(days=40)
    old.save()
    recent = make_run(acceptance_state=RunState.PUBLISHED, published_at=timezone.now())
    rejected = make_run(acceptance_state=RunState.REJECTED)
    old_file, recent_file, rejected_file = (
        _attempt_on(r, n) for r, n in ((old, 2), (recent, 3), (rejected, 4))
    )
    shared = _attempt_on(old, 5)
    screenshot_attempt(make_tasks(recent, 1)[0], tiny_png(5, 5))  # also named by a live run
    old_orphan = artefacts.store(b"<html>old</html>", "html")
    _age(folder / old_orphan, 120)
    young_orphan = artefacts.store(b"<html>young</html>", "html")
    (folder / ".tmp-inflight").write_bytes(b"half")

    call_command("pruneartefacts", "--published-days", "30", "--dry-run")
    assert (
        "would remove 1 file(s) of published runs and 1 orphan file(s)" in capsys.readouterr().out
    )
    assert (folder / old_file).exists()  # a dry run deletes nothing

    call_command("pruneartefacts", "--published-days", "30")
    left = {p.name for p in folder.iterdir()}
    assert left == {recent_file, rejected_file, shared, young_orphan, ".tmp-inflight"}
    assert old_file not in left and old_orphan not in left
    with pytest.raises(artefacts.ArtefactMissing, match="not stored"):
        artefacts.read_screenshot(old_file)


def test_it_refuses_a_negative_age(folder):
    with pytest.raises(CommandError, match="--published-days must be 0 or more"):
        call_command("pruneartefacts", "--published-days", "-1")


def test_it_applies_the_page_archives_retention_too(folder, settings, capsys):
    from recovery.archive import store

    settings.SALVAGE_ARCHIVE_DAYS = 7
    old = store.put("http://shop.test/old", 200, [], b"<html>old</html>", [])
    new = store.put("http://shop.test/new", 200, [], b"<html>new</html>", [])
    then = time.time() - 8 * 86400
    os.utime(store.path_for(old.sha256), (then, then))

    call_command("pruneartefacts", "--dry-run")
    assert "page archive: would remove 1 expired and 0 over its cap, kept 1" in (
        capsys.readouterr().out
    )
    assert store.path_for(old.sha256).exists()
    call_command("pruneartefacts")
    assert "page archive: removed 1 expired and 0 over its cap, kept 1" in capsys.readouterr().out
    assert not store.path_for(old.sha256).exists() and store.path_for(new.sha256).exists()
    # The triage files' rule leaves the archive's folder alone.
    assert (folder / "archive").is_dir()
