"""Fields by CSS selector, type coercion, entity keys, links and cursors (pure)."""

from __future__ import annotations

import pytest
from selectolax.lexbor import LexborHTMLParser

from recovery.fetch import extraction
from recovery.fetch.extraction import (
    CoercionError,
    ExtractionError,
    extract_cursor,
    extract_fields,
    extract_links,
    parse_bool,
    parse_decimal,
    parse_int,
)
from recovery.outcomes import ErrorClass
from recovery.sandbox.site import product_for, render_listing, render_product

PRODUCT_FIELDS = {
    "title": {"selector": "h1", "type": "text", "required": True},
    "price": {"selector": ".price", "type": "decimal", "required": True},
    "sku": {"selector": "[data-sku]", "attr": "data-sku", "type": "text", "required": True},
    "in_stock": {"selector": ".stock", "attr": "data-in-stock", "type": "bool"},
    "reviews": {"selector": ".reviews", "type": "int"},
    "retailer": {"selector": "[data-retailer]", "attr": "data-retailer", "type": "text"},
}


def tree(html: str) -> LexborHTMLParser:
    return LexborHTMLParser(html)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("£1,234.50", "1234.50"),
        ("$12.00", "12.00"),
        ("1.234,50 €", "1234.50"),
        ("EUR 1.234.567,89", "1234567.89"),
        ("12,50", "12.50"),
        ("1,234", "1234"),  # the English reading of a lone comma + 3 digits
        ("1,234,567", "1234567"),
        ("1.234.567", "1234567"),
        ("1 234,50", "1234.50"),
        # A space-grouped number with three decimals: the comma is the decimal mark (a space
        # groups thousands, so the comma cannot), unlike a lone "1,234".
        ("1 234,567", "1234.567"),
        ("1\u00a0234,567", "1234.567"),
        ("1.234,567", "1234.567"),
        ("1 234.567", "1234.567"),
        ("12\u00a0345,00 kr", "12345.00"),
        ("CHF 1'234.50", "1234.50"),
        ("£-5.00", "-5.00"),
        ("-£5.00", "-5.00"),
        ("Sale - £5.00", "5.00"),  # a spaced dash is punctuation
        ("  £0.99 ", "0.99"),
        ("7", "7"),
    ],
)
def test_it_reads_decimals(text, value):
    assert parse_decimal(text) == value


@pytest.mark.parametrize(
    "text", ["N/A", "", "free", "12.00 - 15.00", "1,23,456", "1,2,3", "1.2.3,4,5", "1.234,5.6"]
)
def test_unreadable_decimals_fail(text):
    with pytest.raises(CoercionError):
        parse_decimal(text)


@pytest.mark.parametrize(
    ("text", "value"), [("1,234", 1234), ("12 reviews", 12), ("-3", -3), ("1 000", 1000)]
)
def test_it_reads_ints(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["1.5", "abc", "1 2 3 4", ""])
def test_unreadable_ints_fail(text):
    with pytest.raises(CoercionError):
        parse_int(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("In stock", True),
        ("YES", True),
        ("https://schema.org/InStock", True),
        ("false", False),
        ("Out of stock", False),
        ("sold  out", False),
        ("0", False),
    ],
)
def test_it_reads_bools(text, value):
    assert parse_bool(text) is value


def test_an_unknown_bool_fails():
    with pytest.raises(CoercionError):
        parse_bool("maybe")


def test_it_extracts_a_sandbox_product_page():
    p = product_for(7, seed=3, pages=100)
    fields = extract_fields(tree(render_product(p, seed=3)), PRODUCT_FIELDS)
    assert fields == {
        "title": p.title,
        "price": f"{p.pence / 100:.2f}",
        "sku": p.sku,
        "in_stock": p.in_stock,
        "reviews": p.reviews,
        "retailer": p.retailer,
    }


def test_text_fields_collapse_whitespace():
    fields = extract_fields(
        tree("<h1>\n  Big\t <b>Lamp</b>\n</h1>"), {"title": {"selector": "h1", "type": "text"}}
    )
    assert fields["title"] == "Big Lamp"


def test_a_missing_optional_field_is_none():
    fields = extract_fields(tree("<h1>x</h1>"), {"reviews": {"selector": ".reviews"}})
    assert fields == {"reviews": None}


def test_a_missing_required_field_names_the_field():
    with pytest.raises(ExtractionError) as info:
        extract_fields(tree("<h1>x</h1>"), PRODUCT_FIELDS)
    assert info.value.field == "price"
    assert info.value.error_class is ErrorClass.SELECTOR
    assert "'.price' matched nothing" in str(info.value)


def test_an_empty_required_attribute_is_a_failure():
    html = '<h1>t</h1><p class="price">£1.00</p><div data-sku="">x</div>'
    with pytest.raises(ExtractionError, match=r"'sku'.*is empty"):
        extract_fields(tree(html), PRODUCT_FIELDS)


def test_a_failed_coercion_names_the_field_and_value():
    p = product_for(1)
    html = render_product(p, seed=0, price="N/A")
    with pytest.raises(ExtractionError) as info:
        extract_fields(tree(html), PRODUCT_FIELDS)
    assert info.value.field == "price"
    assert "'N/A'" in str(info.value)


def test_a_failed_coercion_of_an_optional_field_is_a_failure_too():
    with pytest.raises(ExtractionError, match="reviews"):
        extract_fields(
            tree('<span class="reviews">lots</span>'),
            {"reviews": {"selector": ".reviews", "type": "int"}},
        )


def test_an_invalid_selector_is_a_selector_failure():
    with pytest.raises(ExtractionError, match="invalid CSS selector"):
        extract_fields(tree("<h1>x</h1>"), {"title": {"selector": "h1[", "required": True}})


def test_the_entity_key_comes_from_a_field_or_the_url():
    spec = {"entity_key": {"field": "sku"}}
    assert extraction.entity_key(spec, {"sku": " SKU-1 "}, "http://a/x") == "SKU-1"
    url_spec = {"entity_key": {"from": "url"}}
    assert extraction.entity_key(url_spec, {}, "HTTP://Shop.Test/x?utm_source=a") == (
        "http://shop.test/x"
    )
    with pytest.raises(ExtractionError, match="entity key"):
        extraction.entity_key(spec, {"sku": None}, "http://a/x")


LINKS = {"selector": "a.product-link", "attr": "href", "page_type": "product", "max_depth": 1}


def test_links_are_resolved_canonical_and_deduplicated():
    html = (
        '<a class="product-link" href="/product/2">a</a>'
        '<a class="product-link" href="product/3?utm_source=x#frag">b</a>'
        '<a class="product-link" href="/product/2#again">dup</a>'
        '<a class="product-link" href="javascript:void(0)">js</a>'
        '<a class="product-link" href="mailto:a@b.c">mail</a>'
        '<a class="product-link" href="http://other.test/product/9">off-site</a>'
        '<a class="product-link" href="http://[bad">bad</a>'
        '<a class="product-link">no href</a>'
        '<a class="other" href="/product/5">not selected</a>'
    )
    urls = extract_links(tree(html), LINKS, "http://Shop.test/category/x")
    assert urls == ["http://shop.test/product/2", "http://shop.test/category/product/3"]


def test_the_allow_list_filters_links_and_may_leave_the_host():
    html = (
        '<a class="product-link" href="/product/2">a</a>'
        '<a class="product-link" href="/about">b</a>'
        '<a class="product-link" href="http://other.test/product/9">c</a>'
    )
    links = {**LINKS, "allow": ["/product/"]}
    urls = extract_links(tree(html), links, "http://shop.test/")
    assert urls == ["http://shop.test/product/2", "http://other.test/product/9"]


def test_links_respect_base_href_and_the_limit():
    html = '<base href="http://cdn.test/b/">' + "".join(
        f'<a class="product-link" href="p{i}">x</a>' for i in range(10)
    )
    urls = extract_links(tree(html), {**LINKS, "allow": ["."]}, "http://shop.test/", limit=3)
    assert urls == ["http://cdn.test/b/p0", "http://cdn.test/b/p1", "http://cdn.test/b/p2"]


def test_the_cursor_is_the_next_page_url():
    items = [product_for(i) for i in (5, 4)]
    html = render_listing(items, total=5, next_href="/listing?cursor=abc")
    cursor = {"selector": "a.next", "attr": "href"}
    assert extract_cursor(tree(html), cursor, "http://shop.test/listing") == (
        "http://shop.test/listing?cursor=abc"
    )
    last = render_listing(items, total=5, next_href=None)
    assert extract_cursor(tree(last), cursor, "http://shop.test/listing") is None
    self_link = render_listing(items, total=5, next_href="/listing")
    assert extract_cursor(tree(self_link), cursor, "http://shop.test/listing") is None


def test_offset_of_reads_the_offset_parameter():
    assert extraction.offset_of("http://s/listing?limit=20&offset=40") == 40
    assert extraction.offset_of("http://s/listing?cursor=abc") is None
    assert extraction.offset_of("http://s/listing?start=5", "start") == 5


def test_an_invalid_allow_pattern_is_a_selector_failure():
    with pytest.raises(ExtractionError, match="invalid allow pattern"):
        extract_links(
            tree('<a class="product-link" href="/x">x</a>'), {**LINKS, "allow": ["("]}, "http://s/"
        )


def test_the_shared_css_engine_answers_as_each_documents_own():
    import threading

    from selectolax.lexbor import LexborHTMLParser, SelectolaxError

    from recovery.fetch.extraction import css_first

    docs = [
        "<html><body><div class='product'><h1>A</h1><p class=price>1</p></div></body></html>",
        "<div id=x><span data-sku='S1'>s</span><base href='/b/'></div>",
        "<template><p class=price>inert</p></template><p class=price>2</p>",
        "",
    ]
    selectors = ["div.product h1", ".price", "[data-sku]", "#x span", "base[href]", "html", "*"]
    for html in docs:
        tree = LexborHTMLParser(html)
        for selector in selectors:
            ours, theirs = css_first(tree, selector), tree.css_first(selector)
            assert (ours and ours.html) == (theirs and theirs.html), (html, selector)
            assert ours is None or ours.parser is tree
    with pytest.raises(SelectolaxError):
        css_first(LexborHTMLParser("<p>x</p>"), "div[")
    found = []
    thread = threading.Thread(
        target=lambda: found.append(css_first(LexborHTMLParser(docs[0]), "h1").text())
    )
    thread.start()
    thread.join()
    assert found == ["A"]


def test_a_timestamp_field_is_stored_as_iso_8601_in_utc():
    from recovery.fetch.extraction import CoercionError, parse_timestamp

    assert parse_timestamp(" 2026-12-01T09:30:00+01:00 ") == "2026-12-01T08:30:00+00:00"
    assert parse_timestamp("2026-12-01T09:30:00Z") == "2026-12-01T09:30:00+00:00"
    assert parse_timestamp("2026-12-01 09:30") == "2026-12-01T09:30:00+00:00"
    assert parse_timestamp("2026-12-01") == "2026-12-01T00:00:00+00:00"
    with pytest.raises(CoercionError, match="not an ISO 8601"):
        parse_timestamp("yesterday")
