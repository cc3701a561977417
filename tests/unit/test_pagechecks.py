"""Page-state checks on the sandbox's own pages: a 200 is not data until it passes these."""

from __future__ import annotations

import pytest
from selectolax.lexbor import LexborHTMLParser

from recovery.pagechecks import PageCheckFailure, PageView, check_page
from recovery.providers.base import ErrorClass
from recovery.sandbox.site import product_for, render_misbehaving, render_product

# The markers of docs/spec-format.md, as specs.validate() normalises them.
PRODUCT = {
    "expect": {"selector": "div.product"},
    "consent": {"selector": "#consent-banner"},
    "login": {"selector": "form#login"},
    "challenge": {"text": "verify you are (a )?human"},
    "empty_shell": {"min_text_chars": 40},
}


def view(html: str) -> PageView:
    return PageView(LexborHTMLParser(html))


def failure(html: str, spec: dict = PRODUCT) -> PageCheckFailure:
    with pytest.raises(PageCheckFailure) as info:
        check_page(view(html), spec)
    return info.value


def test_a_normal_product_page_passes():
    check_page(view(render_product(product_for(3), seed=0)), PRODUCT)


@pytest.mark.parametrize(
    ("kind", "error_class"),
    [
        ("consent", ErrorClass.CONSENT),
        ("login", ErrorClass.LOGIN),
        ("challenge", ErrorClass.CHALLENGE),
        ("wrong_template", ErrorClass.WRONG_TEMPLATE),
        ("empty_shell", ErrorClass.EMPTY_SHELL),
    ],
)
def test_each_misbehaving_200_gets_its_class(kind, error_class):
    error = failure(render_misbehaving(kind, product_for(3)))
    assert error.error_class is error_class
    assert error.reason  # the artefact says what matched


def test_the_reason_names_what_matched():
    error = failure(render_misbehaving("challenge", product_for(1)))
    assert "challenge marker present" in error.reason
    assert "verify you are human" in error.reason.lower()


def test_text_markers_ignore_scripts_and_case():
    html = (
        "<html><body><div class='product'><h1>Lamp</h1><p>"
        + "A fine lamp for any room. " * 5
        + "</p></div><script>if (needCheck) show('Verify you are human')</script></body></html>"
    )
    check_page(view(html), PRODUCT)  # the phrase only occurs inside <script>
    error = failure(html.replace("A fine lamp", "Please VERIFY YOU ARE A HUMAN. A fine lamp"))
    assert error.error_class is ErrorClass.CHALLENGE


def test_a_marker_with_selector_and_text_needs_both():
    spec = {"login": {"selector": "form", "text": "sign in"}}
    check_page(view("<form><input></form><p>search</p>"), spec)
    assert failure("<form><input></form><p>Sign in</p>", spec).error_class is ErrorClass.LOGIN


def test_interstitials_win_over_the_missing_template():
    # A consent page has no div.product either; the specific diagnosis is the useful one.
    error = failure(render_misbehaving("consent", product_for(1)))
    assert error.error_class is ErrorClass.CONSENT


def test_the_empty_shell_counts_visible_characters_only():
    html = (
        "<html><body><div id='app'></div><script>"
        + "x" * 5000
        + "</script><style>body{}</style></body></html>"
    )
    error = failure(html, {"empty_shell": {"min_text_chars": 10}})
    assert error.error_class is ErrorClass.EMPTY_SHELL
    assert "0 visible characters" in error.reason


def test_no_markers_means_no_checks():
    check_page(view("<html></html>"), {"fields": {}})


def test_a_bad_marker_selector_is_a_selector_failure():
    error = failure("<p>x</p>", {"consent": {"selector": "div["}})
    assert error.error_class is ErrorClass.SELECTOR


def test_exactly_min_text_chars_visible_characters_is_not_an_empty_shell():
    """The boundary: `min_text_chars` visible characters pass, one fewer is a shell
    (whitespace and script text do not count)."""
    spec = {"empty_shell": {"min_text_chars": 10}}

    def page(text: str) -> str:
        return f"<html><body><p> {text} </p>\n<script>var x = 1;</script></body></html>"

    assert view(page("abcde fghij")).visible_chars == 10
    check_page(view(page("abcde fghij")), spec)  # exactly 10: data
    error = failure(page("abcde fghi"), spec)  # 9: a shell
    assert error.error_class is ErrorClass.EMPTY_SHELL
    assert "9 visible characters, expected at least 10" in error.reason
