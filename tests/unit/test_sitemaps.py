"""Sitemap files read by recovery.fetch.sitemaps (pure): index and urlset, gzip, lastmod, the
protocol's limits and the XML a sitemap must not be."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import pytest

from recovery.fetch import sitemaps
from recovery.outcomes import ErrorClass
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
    # ... one level deeper, each with half of what is left of the run's file budget.
    share = (sitemaps.MAX_FILES - 1) // 2
    child = {**config, "depth": 1, "budget": share}
    assert all(d.navigation == {"sitemap": child} for d in outcome.discovered)
    assert all(d.priority == sitemaps.PRIORITY for d in outcome.discovered)
    assert outcome.artefact["sitemap"] == {
        "kind": "sitemapindex",
        "sitemaps": 2,
        "repeats": 0,
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


@pytest.mark.parametrize(
    "loc", ["http://", "https://", "http:///product/1", "http:", "mailto:x@shop.example", " "]
)
def test_an_absolute_loc_is_never_joined_onto_the_files_url(loc):
    # urljoin(file, "http://") is the file itself: it must not become a page task.
    body = f'<urlset xmlns="{sitemaps.NAMESPACE}"><url><loc>{loc}</loc></url></urlset>'.encode()
    outcome = read(body)
    assert outcome.discovered == []
    assert outcome.artefact["sitemap"]["unusable"] == 1
    assert outcome.artefact["sitemap"]["urls"] == 0


def test_urls_listed_counts_distinct_urls_and_reports_repeats():
    body = sandbox.edges(BASE)
    outcome = read(body)
    assert [d.url for d in outcome.discovered] == [
        f"{BASE}/product/{i}" for i in sandbox.EDGE_PRODUCTS
    ]
    counts = outcome.artefact["sitemap"]
    listed = sum(times for _loc, times in sandbox.EDGE_LOCS)
    assert counts["urls"] == len(sandbox.EDGE_PRODUCTS)
    assert counts["unusable"] == 4  # http://, https:///product/9, empty, mailto:
    assert counts["repeats"] == listed - counts["urls"] - counts["unusable"] == 3
    assert "no host" in outcome.artefact["reason"]


def test_rules_give_page_types_first_match_wins_and_unmatched_urls_are_counted():
    body = sandbox.urlset(BASE, []).replace(
        b"</urlset>",
        b"".join(
            f"<url><loc>{BASE}{path}</loc></url>".encode()
            for path in ("/product/1", "/category/shoes", "/product/special", "/about")
        )
        + b"</urlset>",
    )
    rules = [
        {"pattern": "/product/special", "page_type": "listing"},
        {"pattern": "/product/", "page_type": "product"},
        {"pattern": "^http://shop\\.example/category/", "page_type": "category"},
    ]
    outcome = read(body, {"rules": rules})
    assert [(d.url.removeprefix(BASE), d.page_type) for d in outcome.discovered] == [
        ("/product/1", "product"),
        ("/category/shoes", "category"),
        ("/product/special", "listing"),
    ]
    assert outcome.artefact["sitemap"]["unmatched"] == 1
    assert "matched no sitemap rule" in outcome.artefact["reason"]
    # With a default page type, a URL no rule matches takes it.
    outcome = read(body, {"rules": rules, "page_type": "page"})
    assert outcome.discovered[-1].page_type == "page"
    assert outcome.artefact["sitemap"]["unmatched"] == 0


def test_an_index_at_the_depth_limit_is_refused_whole():
    body = sandbox.index(BASE, ["/a.xml"])
    below = read(body, {"page_type": "product", "depth": sitemaps.MAX_DEPTH - 1, "budget": 9})
    assert below.discovered[0].navigation["sitemap"]["depth"] == sitemaps.MAX_DEPTH
    with pytest.raises(sitemaps.SitemapError, match="MAX_DEPTH = 4") as err:
        read(body, {"page_type": "product", "depth": sitemaps.MAX_DEPTH, "budget": 9})
    assert err.value.error_class == ErrorClass.TOO_LARGE
    # An empty index adds nothing, so it is no threat at any depth.
    empty = read(sandbox.index(BASE, []), {"page_type": "product", "depth": 99})
    assert empty.discovered == []


def test_an_index_listing_more_sitemaps_than_its_budget_is_refused_whole():
    body = sandbox.index(BASE, ["/a.xml", "/b.xml", "/c.xml"])
    shares = read(body, {"page_type": "product", "budget": 10}).discovered
    assert [d.navigation["sitemap"]["budget"] for d in shares] == [3, 3, 3]
    assert read(body, {"page_type": "product", "budget": 4}).discovered
    with pytest.raises(sitemaps.SitemapError, match="more than the 2 files") as err:
        read(body, {"page_type": "product", "budget": 3})
    assert err.value.error_class == ErrorClass.TOO_LARGE
    assert "MAX_FILES" in err.value.detail


@pytest.mark.parametrize("children", [1, 3, 50, 400])
def test_no_sitemap_tree_makes_a_run_read_more_than_max_files(children):
    """Every index lists `children` new indexes, forever: reading stops at the bounds."""
    pending = [("http://shop.example/0.xml", {"page_type": "product"})]
    read_files = refused = 0
    while pending and read_files <= sitemaps.MAX_FILES:  # (a test that fails, never hangs)
        url, config = pending.pop()
        read_files += 1
        paths = [f"{url.removesuffix('.xml')}-{i}.xml" for i in range(children)]
        body = sandbox.index("", paths)
        try:
            outcome = read(body, config)
        except sitemaps.SitemapError:
            refused += 1
            continue
        pending.extend((d.url, d.navigation["sitemap"]) for d in outcome.discovered)
    assert read_files <= sitemaps.MAX_FILES
    assert refused > 0


def test_a_robots_txt_is_read_for_its_sitemap_lines():
    text = (
        "User-agent: *\nDisallow: /\n"
        f"Sitemap: {BASE}/sitemap_index.xml\nsitemap: /relative.xml\nSitemap: http://\n"
    )
    parsed = sitemaps.parse_robots(text.encode(), BASE + "/robots.txt")
    outcome = sitemaps.outcome(
        parsed, status=200, config={"page_type": "product"}, partition_for=lambda u: "p"
    )
    assert [d.url for d in outcome.discovered] == [
        f"{BASE}/sitemap_index.xml",
        f"{BASE}/relative.xml",
    ]
    assert {d.page_type for d in outcome.discovered} == {sitemaps.SITEMAP_PAGE_TYPE}
    assert outcome.artefact["sitemap"]["robots_txt"] == 1
    assert outcome.artefact["sitemap"]["unusable"] == 1
    with pytest.raises(sitemaps.SitemapError, match="lists no Sitemap: line") as err:
        sitemaps.parse_robots(b"User-agent: *\nAllow: /\n", BASE + "/robots.txt")
    assert err.value.error_class == ErrorClass.SITEMAP_INVALID
    assert sitemaps.is_robots_txt(BASE + "/robots.txt")
    assert not sitemaps.is_robots_txt(BASE + "/robots.txt?x=1")
    assert not sitemaps.is_robots_txt(BASE + "/a/robots.txt")


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
