"""The pieces of the head re-read (fetch.drift) that need no server: URLs, totals, the spec."""

from __future__ import annotations

import pytest
from selectolax.lexbor import LexborHTMLParser

from recovery.fetch import extraction
from recovery.intake import specs


@pytest.mark.parametrize(
    "url, offset, expected",
    [
        ("http://s.test/l?offset=30&limit=10", 0, "http://s.test/l?offset=0&limit=10"),
        ("http://s.test/l?limit=10", 20, "http://s.test/l?limit=10&offset=20"),
        ("http://s.test/l?a=&offset=5#x", 0, "http://s.test/l?a=&offset=0#x"),
    ],
)
def test_it_moves_a_listing_url_to_another_offset(url, offset, expected):
    assert extraction.with_offset(url, offset) == expected


@pytest.mark.parametrize(
    "html, total, expected",
    [
        ('<div class="l" data-total="1234">', {"selector": ".l", "attr": "data-total"}, 1234),
        ('<p class="n">1,234 products</p>', {"selector": ".n"}, 1234),
        ('<p class="n">no count</p>', {"selector": ".n"}, None),
        ("<p>nothing</p>", {"selector": ".n"}, None),
        ('<p class="n">5</p>', None, None),
    ],
)
def test_it_reads_the_total_a_listing_shows(html, total, expected):
    assert extraction.listing_total(LexborHTMLParser(html), total) == expected


BASE = {"name": "s", "page_types": {"listing": {"cursor": {"selector": "a.next"}}}}


def with_total(total):
    spec = {**BASE, "page_types": {"listing": {"cursor": {"selector": "a.next", "total": total}}}}
    return specs.validate(spec)


def test_it_keeps_a_cursor_total_and_checks_it():
    spec = with_total({"selector": "div.listing", "attr": "data-total"})
    assert spec["page_types"]["listing"]["cursor"]["total"] == {
        "selector": "div.listing",
        "attr": "data-total",
    }
    assert "total" not in specs.validate(BASE)["page_types"]["listing"]["cursor"]
    for bad, message in [
        ({"attr": "x"}, "page_types.listing.cursor.total.selector: required"),
        ({"selector": "div", "count": 1}, "page_types.listing.cursor.total.count: unknown key"),
        ({"selector": "div[", "attr": "x"}, "page_types.listing.cursor.total.selector"),
    ]:
        with pytest.raises(specs.SpecError) as info:
            with_total(bad)
        assert message in str(info.value)
