"""pruneartefacts: which triage files go (published long ago, orphans) and which stay."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from recovery import artefacts
from recovery.states.run import RunState
from tests.browser.browser_fixtures import screenshot_attempt, tiny_png
from tests.factories import make_run, make_tasks


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
