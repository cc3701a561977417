"""Exports kept as files, so a download can be resumed (HTTP Range) and revalidated (ETag).

`identity(run, fmt)` is the export's entity tag: a hash of what decides its bytes, so equal
tags mean equal files. It is computed from one aggregate over the run's exported rows (their
number, the sum of their ids, the sum of their versions, the newest `updated_at`: a correction,
a quarantine or a release changes one of them), the dataset's spec hash (it decides the
columns), the partial-result marks, the format and REVISION, which goes up whenever the
export's layout changes (and pyarrow's version for Parquet, whose writer names itself in the
file).

Files live under SALVAGE_EXPORT_CACHE_DIR as `run<id>-<tag>.<fmt>`, written to a temporary
name and renamed, so a file is whole or absent:
- `materialise()` writes the whole file before answering (a Range request needs byte
  offsets of a file that exists);
- `tee()` streams the export to the client while writing the same bytes to the file, which is
  kept only if the stream ran to its end (a client that stops leaves no file).
Files of the same run and format under an older tag, and files unused for
SALVAGE_EXPORT_CACHE_SECONDS, are removed when a new file is written; a reader that opened one
keeps reading it (POSIX keeps an unlinked file until it is closed).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Max, Sum

from recovery.delivery import exports, partial
from recovery.models import Run

REVISION = "2"  # 2: the partial-result provenance columns; Parquet


def identity(run: Run, fmt: str) -> str:
    return fingerprint(run, fmt)[0]


def fingerprint(run: Run, fmt: str) -> tuple[str, int]:
    """(the export's entity tag, its number of rows): the rows let a client check that a saved
    file is whole (the API sends them as `Salvage-Rows`)."""
    facts = (
        exports.rows_queryset(run)
        .order_by()
        .aggregate(
            rows=Count("pk"), ids=Sum("pk"), versions=Sum("version"), newest=Max("updated_at")
        )
    )
    parts = [
        REVISION,
        fmt,
        run.pk,
        run.dataset.spec_sha256,
        facts["rows"],
        int(facts["ids"] or 0),  # PostgreSQL's sum of bigints is numeric: a Decimal
        int(facts["versions"] or 0),
        facts["newest"].isoformat() if facts["newest"] else "",
        *partial.marks(run).as_dict().values(),
    ]
    if fmt == "parquet":
        import pyarrow

        parts.append(pyarrow.__version__)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32], int(facts["rows"])


def _directory() -> Path:
    directory = Path(settings.SALVAGE_EXPORT_CACHE_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def path_for(run: Run, fmt: str, tag: str) -> Path:
    return _directory() / f"run{run.pk}-{tag}.{fmt}"


def cached(run: Run, fmt: str, tag: str) -> Path | None:
    """The export's file if it was written whole; marks it used."""
    path = path_for(run, fmt, tag)
    try:
        os.utime(path)
    except FileNotFoundError:
        return None
    return path


def materialise(run: Run, fmt: str, tag: str) -> Path:
    """The export's file, written now if absent (ExportError as exports.stream_bytes)."""
    found = cached(run, fmt, tag)
    if found is not None:
        return found
    for _ in tee(run, fmt, tag):
        pass
    return path_for(run, fmt, tag)


def tee(run: Run, fmt: str, tag: str) -> Iterator[bytes]:
    """The export's bytes as they are made, written to its file as well; the file is renamed
    into place only when the last byte was written. ExportError before the first byte as
    exports.stream_bytes."""
    chunks = exports.stream_bytes(run.pk, fmt)
    target = path_for(run, fmt, tag)
    return _teed(chunks, run, fmt, target)


def _teed(chunks: Iterator[bytes], run: Run, fmt: str, target: Path) -> Iterator[bytes]:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    done = False
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                yield chunk
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        done = True
    finally:
        if not done:
            Path(tmp).unlink(missing_ok=True)
    prune(run, fmt, keep=target)


def prune(run: Run, fmt: str, *, keep: Path) -> None:
    """Remove the run's older files of this format and every file unused for too long."""
    stale_before = time.time() - settings.SALVAGE_EXPORT_CACHE_SECONDS
    for path in keep.parent.iterdir():
        if path == keep:
            continue
        try:
            # A temporary file (".name.xyz") is some stream's work in progress, unless stale.
            superseded = path.name.startswith(f"run{run.pk}-") and path.suffix == f".{fmt}"
            if superseded or path.stat().st_mtime < stale_before:
                path.unlink()
        except FileNotFoundError:
            continue  # another process removed it first
