"""Sitemap files read by recovery.sitemaps (pure): index and urlset, gzip, lastmod, the
protocol's limits and the XML a sitemap must not be."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import pytest

from recovery import sitemaps
from recovery.providers.base import ErrorClass
from recovery.sandbox import sitemaps as sandbox

BASE = "http://shop.example"


def read(body: bytes, config: dict | None = None):
    parsed = sitemaps.parse(body, BASE + "/sitemap.xml")
    config = config or {"page_type": "product"}
    return sitemaps.outcome(parsed, status=200, config=config, partition_for=lambda u: "p")


def test_it_reads_a_urlset_into_tasks_of_the_configured_page_type():
    outcome = read(sandbox.urlset(BASE, range(1, 4)))
    assert [d.url for d in outcome.discovered] == [f"{BASE}/product/{i}" for i in (1, 2, 3)]
    assert {d.page_type for d in outcome.discovered} == {"product"}
    assert {d.discovery for d in outcome.discovered} == {"sitemap"}
    # A sitemap's URL is a manifest-level page for link depth.
    assert all(d.navigation == {"link_depth": 0} for d in outcome.discovered)
    assert outcome.artefact["sitemap"]["urls"] == 3


def test_it_reads_an_index_into_sitemap_tasks_that_carry_the_configuration():
    config = {"page_type": "product", "since": "2026-11-01T00:00:00+00:00"}
    outcome = read(sandbox.index(BASE, ["/a.xml", "/b.xml.gz"]), config)
    assert [d.url for d in outcome.discovered] == [BASE + "/a.xml", BASE + "/b.xml.gz"]
    assert {d.page_type for d in outcome.discovered} == {sitemaps.SITEMAP_PAGE_TYPE}
    assert all(d.navigation == {"sitemap": config} for d in outcome.discovered)
    assert all(d.priority == sitemaps.PRIORITY for d in outcome.discovered)
    assert outcome.artefact["sitemap"] == {
        "kind": "sitemapindex",
        "sitemaps": 2,
        "skipped_lastmod": 0,
        "unusable": 0,
        "unreadable_lastmod": 0,
    }


def test_it_reads_gzip_files():
    outcome = read(gzip.compress(sandbox.urlset(BASE, range(1, 11))))
    assert len(outcome.discovered) == 10


def test_it_skips_urls_modified_before_lastmod_since_and_keeps_undated_ones():
    body = (
        f'<urlset xmlns="{sitemaps.NAMESPACE}">'
        "<url><loc>http://shop.example/old</loc><lastmod>2026-10-01</lastmod></url>"
        "<url><loc>http://shop.example/new</loc><lastmod>2026-11-02T10:00:00+01:00</lastmod></url>"
        "<url><loc>http://shop.example/undated</loc></url>"
        "<url><loc>http://shop.example/garbled</loc><lastmod>yesterday</lastmod></url>"
        "</urlset>"
    ).encode()
    since = sitemaps.resolve_since("2026-11-01", datetime(2026, 12, 1, tzinfo=UTC))
    outcome = read(body, {"page_type": "product", "since": since})
    assert [d.url.rsplit("/", 1)[1] for d in outcome.discovered] == ["new", "undated", "garbled"]
    counts = outcome.artefact["sitemap"]
    assert counts["skipped_lastmod"] == 1 and counts["unreadable_lastmod"] == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026", datetime(2026, 1, 1, tzinfo=UTC)),
        ("2026-11", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-02", datetime(2026, 11, 2, tzinfo=UTC)),
        ("2026-11-02T10:30Z", datetime(2026, 11, 2, 10, 30, tzinfo=UTC)),
        ("2026-11-02T10:30:15.5+02:00", datetime(2026, 11, 2, 8, 30, 15, tzinfo=UTC)),
        ("2026-11-02T10:30:15-0500", datetime(2026, 11, 2, 15, 30, 15, tzinfo=UTC)),
        ("2026-13-01", None),
        ("last tuesday", None),
    ],
)
def test_it_parses_w3c_datetimes(text, expected):
    assert sitemaps.parse_lastmod(text) == expected


def test_relative_lastmod_since_is_measured_from_the_run_creation():
    now = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    assert sitemaps.resolve_since("7d", now) == "2026-11-24T06:00:00+00:00"
    assert sitemaps.resolve_since("36h", now) == "2026-11-29T18:00:00+00:00"
    with pytest.raises(ValueError, match="not an ISO date"):
        sitemaps.check_since("a week ago")


def test_it_refuses_more_than_50000_entries_whole():
    with pytest.raises(sitemaps.SitemapError) as err:
        sitemaps.parse(sandbox.urlset(BASE, range(1, sitemaps.MAX_ENTRIES + 2)), BASE)
    assert err.value.error_class == ErrorClass.TOO_LARGE
    assert "more than 50,000 <url> entries" in err.value.detail
    # Exactly at the limit is fine.
    parsed = sitemaps.parse(sandbox.urlset(BASE, range(1, sitemaps.MAX_ENTRIES + 1)), BASE)
    assert len(parsed.entries) == sitemaps.MAX_ENTRIES


def test_it_stops_a_gzip_bomb_at_the_limit():
    bomb = gzip.compress(b"<urlset>" + b" " * (3 * 1024 * 1024) + b"</urlset>")
    assert len(bomb) < 10_000
    with pytest.raises(sitemaps.SitemapError) as err:
        sitemaps.decompress(bomb, limit=1024 * 1024)
    assert err.value.error_class == ErrorClass.TOO_LARGE
    assert "over 1,048,576 bytes once decompressed" in err.value.detail
    # The real limit, on the sandbox's own bomb (60 MB inflated).
    with pytest.raises(sitemaps.SitemapError, match="once decompressed"):
        sitemaps.parse(sandbox._bomb(), BASE)


def test_a_truncated_or_corrupt_gzip_file_is_invalid():
    whole = gzip.compress(sandbox.urlset(BASE, range(1, 200)))
    with pytest.raises(sitemaps.SitemapError, match="truncated gzip") as err:
        sitemaps.decompress(whole[: len(whole) // 2])
    assert err.value.error_class == ErrorClass.SITEMAP_INVALID
    with pytest.raises(sitemaps.SitemapError, match="corrupt gzip"):
        sitemaps.decompress(b"\x1f\x8b" + b"\x00" * 40)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (sandbox.MALFORMED, r"malformed XML at line 5, column \d+"),
        (sandbox.DOCTYPE, "a DOCTYPE .* is not allowed"),
        (sandbox.NOT_A_SITEMAP, "the root element is <html>"),
        (b'<urlset xmlns="urn:other"/>', r"the root element is <\{urn:other\}urlset>"),
        (b"", "malformed XML|empty file"),
    ],
)
def test_xml_that_is_not_a_usable_sitemap_is_a_clear_error(body, message):
    with pytest.raises(sitemaps.SitemapError, match=message) as err:
        sitemaps.parse(body, BASE)
    assert err.value.error_class == ErrorClass.SITEMAP_INVALID


def test_other_namespaces_inside_an_entry_are_ignored_and_bad_locs_are_counted():
    body = (
        f'<urlset xmlns="{sitemaps.NAMESPACE}" '
        'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        "<url><loc>http://shop.example/p/1</loc>"
        "<image:image><image:loc>http://cdn.example/1.jpg</image:loc></image:image></url>"
        "<url><loc>ftp://shop.example/file</loc></url>"
        "<url><loc>/relative/2</loc></url>"
        "</urlset>"
    ).encode()
    outcome = read(body)
    assert [d.url for d in outcome.discovered] == [
        "http://shop.example/p/1",
        "http://shop.example/relative/2",
    ]
    assert outcome.artefact["sitemap"]["unusable"] == 1
    assert "ftp" in outcome.artefact["reason"]


def test_it_reads_the_text_format_and_refuses_text_that_lists_no_url():
    body = "\ufeffhttp://shop.example/p/1\n\n  https://shop.example/p/2  \nnot a url\n".encode()
    outcome = read(gzip.compress(body))
    assert [d.url for d in outcome.discovered] == [
        "http://shop.example/p/1",
        "https://shop.example/p/2",
    ]
    assert outcome.artefact["sitemap"]["unusable"] == 1
    with pytest.raises(sitemaps.SitemapError, match="no line is an http") as err:
        sitemaps.parse(b'{"urls": []}\n', BASE)
    assert err.value.error_class == ErrorClass.SITEMAP_INVALID
    with pytest.raises(sitemaps.SitemapError, match="byte 3 is not UTF-8"):
        sitemaps.parse(b"htt\xff", BASE)
    lines = "".join(f"http://shop.example/p/{i}\n" for i in range(sitemaps.MAX_ENTRIES + 1))
    with pytest.raises(sitemaps.SitemapError, match="a text sitemap of 50,001 lines"):
        sitemaps.parse(lines.encode(), BASE)
