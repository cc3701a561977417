"""Artefact files for triage: a failed rendered page's screenshot and its rendered HTML.

Files live under SALVAGE_ARTEFACT_DIR (shared storage when dashboards and workers run on
different machines), named by the SHA-256 of their content: written before the attempt that
references them commits (temporary file + rename, so a reader never sees half a file), and a
retry that fails the same way stores nothing new. An attempt's `artefact` JSON names them
(`screenshot`, `rendered_html`); the dashboard serves a screenshot only through
`read_screenshot`, which accepts nothing but a well-formed name of a PNG file.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_NAME = re.compile(r"^[0-9a-f]{64}\.(png|html)$")


class ArtefactMissing(Exception):
    """No such artefact file (never written, removed, or not a valid name)."""


def directory() -> Path:
    from django.conf import settings

    return Path(settings.SALVAGE_ARTEFACT_DIR)


def valid_name(name: object, suffix: str) -> bool:
    return isinstance(name, str) and bool(_NAME.match(name)) and name.endswith("." + suffix)


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
    if not valid_name(name, "png"):
        raise ArtefactMissing("not a screenshot name")
    try:
        data = (directory() / str(name)).read_bytes()
    except OSError:
        raise ArtefactMissing(f"screenshot {name} is not stored") from None
    if not data.startswith(PNG_MAGIC):
        # Never hand the browser anything but an image, whatever the file became.
        raise ArtefactMissing(f"screenshot {name} is not a PNG")
    return data
