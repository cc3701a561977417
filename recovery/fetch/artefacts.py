"""Artefact files for triage: a failed rendered page's screenshot and its rendered HTML.

Files live under SALVAGE_ARTEFACT_DIR (shared storage when dashboards and workers run on
different machines), named by the SHA-256 of their content: written before the attempt that
references them commits (temporary file + rename, so a reader never sees half a file), and a
retry that fails the same way stores nothing new. An attempt's `artefact` JSON names them
(`screenshot`, `rendered_html`); the dashboard serves a screenshot only through
`read_screenshot`, which accepts nothing but a well-formed name of a PNG file, and the rendered
HTML only through `read_rendered_html`, as text (it is served as text/plain, never as a page).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from recovery.keys import ARTEFACT_NAME, valid_artefact_name

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ArtefactMissing(Exception):
    """No such artefact file (never written, removed, or not a valid name)."""


def directory() -> Path:
    from django.conf import settings

    return Path(settings.SALVAGE_ARTEFACT_DIR)


def store(data: bytes, suffix: str) -> str:
    """Write `data` once under its content hash; returns the file name (no directory)."""
    name = f"{hashlib.sha256(data).hexdigest()}.{suffix}"
    folder = directory()
    target = folder / name
    if target.exists():
        return name
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return name


def read_screenshot(name: object) -> bytes:
    """The PNG bytes of a stored screenshot; ArtefactMissing for anything else."""
    if not valid_artefact_name(name, "png"):
        raise ArtefactMissing("not a screenshot name")
    try:
        data = (directory() / str(name)).read_bytes()
    except OSError:
        raise ArtefactMissing(f"screenshot {name} is not stored") from None
    if not data.startswith(PNG_MAGIC):
        # Never hand the browser anything but an image, whatever the file became.
        raise ArtefactMissing(f"screenshot {name} is not a PNG")
    return data


def read_rendered_html(name: object) -> str:
    """The text of a stored rendered page; ArtefactMissing for anything else. The bytes were
    capped at the provider's max_bytes, possibly inside a character: that one is replaced."""
    if not valid_artefact_name(name, "html"):
        raise ArtefactMissing("not a rendered-HTML name")
    try:
        data = (directory() / str(name)).read_bytes()
    except OSError:
        raise ArtefactMissing(f"rendered HTML {name} is not stored") from None
    return data.decode("utf-8", "replace")


# --- retention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneReport:
    kept: int
    removed_orphans: list[str]
    removed_published: list[str]


def prune(*, published_days: int, orphan_minutes: int = 60, dry_run: bool = False) -> PruneReport:
    """Delete artefact files no triage can need any more, and say which.

    Two kinds go: files no attempt names (a worker wrote them and died before its attempt
    committed) once older than `orphan_minutes` — younger ones may belong to a commit still
    in flight — and files named only by attempts of runs published more than `published_days`
    ago (a published run is final: nobody triages it again). A rejected run can be reopened,
    so its files stay. Attempts keep their JSON; a missing file reads as "not stored".
    """
    from django.utils import timezone

    from recovery.models import Attempt
    from recovery.states.choices import RunState

    folder = directory()
    if not folder.is_dir():
        return PruneReport(0, [], [])
    cutoff = timezone.now() - timedelta(days=published_days)
    live: set[str] = set()
    stale: set[str] = set()
    rows = Attempt.objects.filter(artefact__isnull=False).values_list(
        "artefact", "run__acceptance_state", "run__published_at"
    )
    for artefact, run_state, published_at in rows.iterator(chunk_size=2000):
        if not isinstance(artefact, dict):
            continue
        names = {artefact.get("screenshot"), artefact.get("rendered_html")} - {None}
        done = run_state == RunState.PUBLISHED and published_at and published_at < cutoff
        (stale if done else live).update(n for n in names if isinstance(n, str))
    orphan_before = time.time() - orphan_minutes * 60
    orphans: list[str] = []
    published: list[str] = []
    kept = 0
    for path in sorted(folder.iterdir()):
        if not ARTEFACT_NAME.match(path.name):
            continue  # temporary files of a store() in flight, or not ours
        if path.name in live:
            kept += 1
        elif path.name in stale:
            published.append(path.name)
        elif path.stat().st_mtime < orphan_before:
            orphans.append(path.name)
        else:
            kept += 1
    if not dry_run:
        for name in orphans + published:
            (folder / name).unlink(missing_ok=True)
    return PruneReport(kept, orphans, published)
