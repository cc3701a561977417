"""recovery.archive.store: content addressing, the per-page cap, expiry and retention."""

from __future__ import annotations

import gzip
import os
import time

import pytest

from recovery.archive import store

BODY = b"<html><body><div class='product'><h1>Kettle</h1><p class='price'>1.00</p></div>" * 40
HEADERS = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Date", "Mon, 07 Dec 2026 06:00:00 GMT"),
    ("Set-Cookie", "session=s3cr3t; HttpOnly"),
    ("ETag", '"abc"'),
]


@pytest.fixture(autouse=True)
def archive_dir(settings, tmp_path):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    settings.SALVAGE_ARCHIVE_MAX_PAGE_BYTES = 100_000
    settings.SALVAGE_ARCHIVE_DAYS = 30
    return tmp_path / "artefacts" / "archive"


def blobs(folder) -> list:
    return sorted(p for p in folder.rglob("*.gz"))


def age(path, days: float) -> None:
    then = time.time() - days * 86400
    os.utime(path, (then, then))


def test_it_stores_the_same_response_once_and_reads_it_back(archive_dir):
    first = store.put("http://shop.test/p/1", 200, HEADERS, BODY, ["http://shop.test/p/1"])
    # Another Date: the same page served again is the same blob (Date is not kept).
    again_headers = [(k, "Tue, 08 Dec 2026 06:00:00 GMT" if k == "Date" else v) for k, v in HEADERS]
    second = store.put("http://shop.test/p/1", 200, again_headers, BODY, ["http://shop.test/p/1"])
    assert first.sha256 and first == second
    assert blobs(archive_dir) == [store.path_for(first.sha256)]
    page = store.get(first.sha256)
    assert (page.url, page.status, page.body) == ("http://shop.test/p/1", 200, BODY)
    assert dict(page.headers) == {"content-type": "text/html; charset=utf-8", "etag": '"abc"'}
    # Compressed on disk, and a different body is a different blob.
    assert first.bytes < len(BODY) / 4
    other = store.put("http://shop.test/p/1", 200, HEADERS, BODY + b"!", [])
    assert other.sha256 != first.sha256 and len(blobs(archive_dir)) == 2


def test_it_never_stores_a_credential_header(archive_dir):
    stored = store.put("http://shop.test/p/2", 200, HEADERS, BODY, [])
    raw = gzip.decompress(store.path_for(stored.sha256).read_bytes())
    assert b"s3cr3t" not in raw and b"set-cookie" not in raw.lower()


def test_a_page_over_the_cap_is_not_archived_and_says_why(archive_dir, settings):
    settings.SALVAGE_ARCHIVE_MAX_PAGE_BYTES = len(BODY) - 1
    stored = store.put("http://shop.test/p/3", 200, HEADERS, BODY, [])
    assert stored.sha256 == ""
    cap = len(BODY) - 1
    assert stored.skipped == f"page of {len(BODY)} bytes is over the archive's cap of {cap}"
    assert blobs(archive_dir) == []


def test_a_missing_damaged_expired_or_badly_named_blob_reads_as_missing(archive_dir):
    stored = store.put("http://shop.test/p/4", 200, HEADERS, BODY, [])
    path = store.path_for(stored.sha256)
    age(path, 31)
    with pytest.raises(store.ArchiveMissing, match="expired"):
        store.get(stored.sha256)
    # Stored again: its age restarts (a fetch produced these bytes just now).
    store.put("http://shop.test/p/4", 200, HEADERS, BODY, [])
    assert store.get(stored.sha256).body == BODY
    path.write_bytes(gzip.compress(b'{"url":"x","status":200,"headers":[]}\nother bytes'))
    with pytest.raises(store.ArchiveMissing, match="damaged"):
        store.get(stored.sha256)
    path.unlink()
    with pytest.raises(store.ArchiveMissing, match="not in the archive"):
        store.get(stored.sha256)
    for bad in ("../../etc/passwd", "ABC", None, "0" * 63):
        with pytest.raises(store.ArchiveMissing, match="not an archive name"):
            store.get(bad)


def test_prune_removes_expired_blobs_then_the_oldest_over_the_total_cap(archive_dir):
    names = []
    for i, days in enumerate((40, 5, 4, 3, 0)):
        stored = store.put(f"http://shop.test/p/{i}", 200, HEADERS, BODY + bytes([i]), [])
        age(store.path_for(stored.sha256), days)
        names.append(stored.sha256)
    (archive_dir / names[1][:2] / ".tmp-inflight").write_bytes(b"half")
    size = store.path_for(names[4]).stat().st_size

    dry = store.prune(days=30, max_bytes=2 * size + size // 2, dry_run=True)
    assert (dry.expired, dry.over_cap, dry.kept) == (1, 2, 2)
    assert len(blobs(archive_dir)) == 5  # a dry run deletes nothing

    report = store.prune(days=30, max_bytes=2 * size + size // 2)
    assert (report.expired, report.over_cap, report.kept) == (1, 2, 2)
    left = {p.name.removesuffix(".gz") for p in blobs(archive_dir)}
    assert left == {names[3], names[4]}  # the two newest fit; the oldest went first
    assert (archive_dir / names[1][:2] / ".tmp-inflight").exists()
    assert report.kept_bytes <= 2 * size + size // 2


def test_prune_of_an_archive_never_written_is_empty():
    assert store.prune() == store.PruneReport(0, 0, 0, 0)
