"""Archived pages as files: one gzip blob per distinct response, named by its SHA-256.

A blob is the response as a worker received it: a one-line JSON head (final URL, redirect hops,
status, headers) then the body, gzip-compressed, stored at
`<SALVAGE_ARTEFACT_DIR>/archive/<2 hex>/<64 hex>.gz`. The name is the SHA-256 of the
uncompressed envelope, so the same response stored twice is one file (a retry, or an unchanged
page of the next window), and a blob whose bytes no longer hash to its name reads as missing:
a damaged file is never extracted as data.

What is left out of the envelope, and why:
- credential, cookie and session headers, by the one sanitiser incidents and logs use
  (`recovery.ops.sanitise.headers`; other values are redacted): guarantee 11 holds for the
  archive as for every artefact. Header names are kept lower-cased, repeats joined. The body
  is kept as served, unredacted: re-extraction must read what a refetch would. It can hold no
  credential of ours (the direct provider sends none: provider_options refuse secrets), and no
  page or URL of the dashboard serves it;
- `Date`, `Age` and `Expires`: they change on every response, so an unchanged page fetched
  again would never share its blob. Extraction reads none of them.

Limits (recovery.settings): a body over SALVAGE_ARCHIVE_MAX_PAGE_BYTES is not stored (`put`
says so, the attempt records why); a blob older than SALVAGE_ARCHIVE_DAYS is expired (`get`
refuses it before `prune` has removed it); `prune` removes expired blobs, then the oldest until
the archive is under SALVAGE_ARCHIVE_MAX_BYTES. Age is the file's mtime: the last time a fetch
produced those bytes (`put` of an existing blob refreshes it; reading it does not).

Written like recovery.fetch.artefacts: a temporary file then a rename (a reader never sees half
a blob), before the attempt that names it commits. A worker killed in between leaves a blob no
attempt names, which expires like any other.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recovery.ops import sanitise

SUBDIR = "archive"
NAME = re.compile(r"^[0-9a-f]{64}$")
# Headers that differ on every response of an unchanged page (see the module docstring).
VOLATILE_HEADERS = frozenset({"date", "age", "expires"})
# Compression level: 6 (zlib's default) stores a 5 KB sandbox page in ~1.9 KB at ~0.1 ms;
# 9 saves a few percent more for twice the CPU on a worker's hot path.
LEVEL = 6
_counter = itertools.count()


class ArchiveMissing(Exception):
    """No usable blob: never stored, removed by retention, expired, damaged or a bad name."""


@dataclass(frozen=True)
class Stored:
    """What `put` did: the blob's name, or why the page was not archived (`sha256` empty)."""

    sha256: str = ""
    bytes: int = 0  # the compressed file's size
    skipped: str = ""


@dataclass
class ArchivedPage:
    """A response read back from the archive (the fields recovery.fetch.responses.Page has)."""

    url: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    hops: list[str] = field(default_factory=list)
    fetched_at: float = 0.0  # the blob's mtime (seconds since the epoch)


def settings_value(name: str) -> Any:
    from django.conf import settings

    return getattr(settings, name)


def directory() -> Path:
    return Path(settings_value("SALVAGE_ARTEFACT_DIR")) / SUBDIR


def path_for(sha256: str) -> Path:
    return directory() / sha256[:2] / f"{sha256}.gz"


def envelope(
    url: str, status: int, headers: list[tuple[str, str]], body: bytes, hops: list[str]
) -> bytes:
    """The bytes a blob holds (uncompressed) and its name hashes."""
    kept = [[k, v] for k, v in sanitise.headers(headers).items() if k not in VOLATILE_HEADERS]
    head = {"v": 1, "url": url, "hops": hops, "status": status, "headers": kept}
    return json.dumps(head, separators=(",", ":"), ensure_ascii=True).encode() + b"\n" + body


def put(
    url: str,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
    hops: list[str] | None = None,
) -> Stored:
    """Store one response (once per content); a body over the per-page cap is refused."""
    cap = int(settings_value("SALVAGE_ARCHIVE_MAX_PAGE_BYTES"))
    if len(body) > cap:
        return Stored(skipped=f"page of {len(body)} bytes is over the archive's cap of {cap}")
    data = envelope(url, status, headers, body, list(hops or []))
    sha256 = hashlib.sha256(data).hexdigest()
    target = path_for(sha256)
    try:
        size = target.stat().st_size
    except FileNotFoundError:
        pass
    else:
        # Same bytes again: one blob, its age restarted (a fetch produced them just now).
        os.utime(target)
        return Stored(sha256, size)
    compressed = gzip.compress(data, compresslevel=LEVEL, mtime=0)
    # A name no other writer uses (pid, thread, counter): cheaper than mkstemp's random names,
    # which cost more than the write itself here. Two writers of one blob each write their own
    # temporary file; the second rename replaces the first with the same bytes.
    tmp = target.parent / f".tmp-{os.getpid()}-{threading.get_ident()}-{next(_counter)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileNotFoundError:
        # The fan-out folder's first blob (a mkdir per put was a third of its cost).
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(compressed)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Stored(sha256, len(compressed))


def get(sha256: object, *, now: float | None = None) -> ArchivedPage:
    """The stored response named `sha256`; ArchiveMissing when there is none to use."""
    if not isinstance(sha256, str) or not NAME.match(sha256):
        raise ArchiveMissing("not an archive name")
    path = path_for(sha256)
    try:
        mtime = path.stat().st_mtime
        compressed = path.read_bytes()
    except OSError:
        raise ArchiveMissing(f"page {sha256[:12]} is not in the archive") from None
    days = float(settings_value("SALVAGE_ARCHIVE_DAYS"))
    if (now if now is not None else time.time()) - mtime > days * 86400:
        raise ArchiveMissing(f"page {sha256[:12]} expired (kept {days:g} days)")
    try:
        data = gzip.decompress(compressed)
    except (OSError, EOFError) as exc:
        raise ArchiveMissing(f"page {sha256[:12]} is damaged: {exc}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ArchiveMissing(f"page {sha256[:12]} is damaged: its bytes changed")
    line, _, body = data.partition(b"\n")
    head = json.loads(line)
    return ArchivedPage(
        url=head["url"],
        status=int(head["status"]),
        headers=[(str(k), str(v)) for k, v in head["headers"]],
        body=body,
        hops=list(head.get("hops") or []),
        fetched_at=mtime,
    )


# --- retention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneReport:
    kept: int
    kept_bytes: int
    expired: int
    over_cap: int  # removed, oldest first, to bring the archive under its total cap


def prune(
    *,
    days: float | None = None,
    max_bytes: int | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> PruneReport:
    """Remove expired blobs, then the oldest until the archive is under its total cap.

    A removed blob is simply "not in the archive": a batch that wanted it fetches the page
    (and counts it as fetched). Temporary files of a `put` in flight are left alone.
    """
    days = float(settings_value("SALVAGE_ARCHIVE_DAYS") if days is None else days)
    cap = int(settings_value("SALVAGE_ARCHIVE_MAX_BYTES") if max_bytes is None else max_bytes)
    root = directory()
    if not root.is_dir():
        return PruneReport(0, 0, 0, 0)
    cutoff = (now if now is not None else time.time()) - days * 86400
    blobs: list[tuple[float, int, Path]] = []
    expired: list[Path] = []
    for fan in root.iterdir():
        if not fan.is_dir():
            continue
        for path in fan.iterdir():
            if not (path.name.endswith(".gz") and NAME.match(path.name[:-3])):
                continue
            stat = path.stat()
            if stat.st_mtime < cutoff:
                expired.append(path)
            else:
                blobs.append((stat.st_mtime, stat.st_size, path))
    blobs.sort(reverse=True)  # newest first: the oldest go when the cap is reached
    kept_bytes = 0
    kept: list[Path] = []
    over: list[Path] = []
    for _mtime, size, path in blobs:
        # Once one blob does not fit, every older one goes too (oldest first, not best fit).
        if not over and kept_bytes + size <= cap:
            kept_bytes += size
            kept.append(path)
        else:
            over.append(path)
    if not dry_run:
        for path in expired + over:
            path.unlink(missing_ok=True)
    return PruneReport(len(kept), kept_bytes, len(expired), len(over))
