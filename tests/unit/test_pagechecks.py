"""Page-state checks on the sandbox's own pages: a 200 is not data until it passes these."""

from __future__ import annotations

import re

import pytest
from selectolax.lexbor import LexborHTMLParser

from recovery.fetch.pagechecks import PageCheckFailure, PageView, check_page
from recovery.outcomes import ErrorClass
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


# --- text markers: searched only where a match can begin, with re.search's answer -----------


def test_only_the_known_characters_fold_onto_ascii_under_ignorecase():
    """search_text skips to the characters a marker's first ASCII character matches under
    IGNORECASE; this holds only if no other character in Unicode folds onto one."""
    import sys

    from recovery.fetch.pagechecks import _ascii_folds

    everything = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000)
    for code in range(128):
        char = chr(code)
        found = set(re.findall(re.escape(char), everything, re.IGNORECASE))
        assert found == _ascii_folds(code), char


MARKERS = [
    "verify you are (a )?human", r"sign\s+in", "verify|human", r"\baccess denied\b",
    "(?:please )?log in", "[Kk]eep", r"(?<=\s)human", "x*", "^please", r"\d+ left", "(a|)b",
    "\u017fign", "\u0130", "(?x) v e r i f y", "(?i:K)e", r"robot(?!s)", "[a-c]x", "é",
]  # fmt: skip
TEXTS = [
    "Please VERIFY you are a human", "nothing here", "Sign   in to continue", "KEEP OUT",
    "\u212aeep calm", "\u017fign here", "i \u0130 \u0131 I", "access denied!", "3 left",
    "robots robot", "humanverify", "", "bx", "aaab", "ÉÉ é",
]  # fmt: skip


@pytest.mark.parametrize("pattern", MARKERS)
def test_search_text_finds_what_re_search_finds(pattern):
    from recovery.fetch.pagechecks import search_text

    for text in [*TEXTS, " ".join(TEXTS)]:
        expected = re.search(pattern, text, re.IGNORECASE)
        got = search_text(pattern, text)
        assert (got and (got.span(), got.groups())) == (
            expected and (expected.span(), expected.groups())
        ), (pattern, text)


def test_search_text_agrees_with_re_search_on_generated_input():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from recovery.fetch.pagechecks import search_text

    alphabet = "abkKsSiI \u212a\u017f\u0130\u0131é1-"
    atoms = st.sampled_from(["a", "k", "s", "i", "K", "S", "I", " ", "1", "é", "\\b", "(?=a)",
                             "(a|k)", "[ks]", "a?", "s+", "(?:i)", ".", "\\s"])  # fmt: skip

    @settings(max_examples=400, deadline=None)
    @given(st.lists(atoms, min_size=1, max_size=5).map("".join), st.text(alphabet, max_size=40))
    def agree(pattern, text):
        expected = re.search(pattern, text, re.IGNORECASE)
        got = search_text(pattern, text)
        assert (got and got.span()) == (expected and expected.span())

    agree()


VISIBLE_CASES = [
    "<html><head><style>h1{}</style><script>x=1</script></head><body><h1>Lamp</h1></body></html>",
    "<html><body><p>a<script>hidden()</script>b</p><style>p{}</style></body></html>",
    "<p>no head <noscript>enable js</noscript> or body tags</p>",
    "<body><template><p>inert</p></template><p>shown</p></body>",
    "<body><svg><script>svg()</script><text>drawn</text></svg></body>",
    "<head><title>t</title></head><frameset><frame src=x></frameset>",
    "<html><body><p>after</p></body></html><script>late()</script>",
    "<SCRIPT>upper()</SCRIPT><p>text</p>",
    "",
]


@pytest.mark.parametrize("html", VISIBLE_CASES)
def test_visible_text_is_the_body_text_without_invisible_elements(html):
    """What a clone stripped of script/style/noscript/template says, with or without the
    clone (it is skipped when none of those is inside the body)."""
    clone = LexborHTMLParser(html).clone()
    clone.strip_tags(["script", "style", "noscript", "template"])
    body = clone.body
    expected = body.text(deep=True, separator=" ", strip=True) if body is not None else ""
    page = view(html)
    assert page.visible_text == expected
    assert page.tree.html == LexborHTMLParser(html).html  # the page itself is left whole
