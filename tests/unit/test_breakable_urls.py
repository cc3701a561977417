"""dashboard_tags.breakable: a URL escaped, breakable after its separators, never inside an
HTML entity or between the scheme's two slashes."""

from __future__ import annotations

from dashboard.templatetags.dashboard_tags import breakable


def test_a_url_breaks_after_each_separator_and_stays_escaped():
    assert breakable("https://a.test/x/y?a=1&b=<2>") == (
        "https://<wbr>a.test/<wbr>x/<wbr>y?<wbr>a=<wbr>1&amp;<wbr>b=<wbr>&lt;2&gt;"
    )


def test_nothing_to_break_and_nothing_given():
    assert breakable("plain-key") == "plain-key"
    assert breakable(None) == ""
    assert breakable("https://a.test/") == "https://<wbr>a.test/"  # none after the last
