"""robots.txt rules (RFC 9309) as fetch.robots reads them, and why not urllib.robotparser."""

from __future__ import annotations

import urllib.robotparser

import pytest
from protego import Protego

from recovery.fetch import robots
from recovery.intake import specs
from recovery.outcomes import ErrorClass

# RFC 9309 2.2.2: the most specific (longest) match wins, whatever the order of the lines.
LONGEST_MATCH = "User-agent: *\nDisallow: /shop\nAllow: /shop/public\n"
# 2.2.3: `*` matches any sequence, `$` anchors the end.
WILDCARDS = "User-agent: *\nDisallow: /*.pdf$\nDisallow: /private*/edit\n"
# 2.2.2: equal-length Allow and Disallow: the least restrictive (Allow) wins.
TIE = "User-agent: *\nDisallow: /page\nAllow: /page\n"
# 2.2.1: a group naming our product token takes precedence over `*`; case-insensitive.
GROUPS = "User-agent: *\nDisallow: /\n\nUser-agent: salvage\nDisallow: /admin\nCrawl-delay: 2\n"


def protego_allows(text: str, path: str, agent: str = "Salvage") -> bool:
    return Protego.parse(text).can_fetch(f"http://shop.test{path}", agent)


def stdlib_allows(text: str, path: str, agent: str = "Salvage") -> bool:
    parser = urllib.robotparser.RobotFileParser()
    parser.parse(text.splitlines())
    return parser.can_fetch(agent, f"http://shop.test{path}")


@pytest.mark.parametrize(
    "text, path, allowed",
    [
        (LONGEST_MATCH, "/shop/public/1", True),
        (LONGEST_MATCH, "/shop/cart", False),
        (LONGEST_MATCH, "/other", True),
        (WILDCARDS, "/files/a.pdf", False),
        (WILDCARDS, "/files/a.pdf?x=1", True),
        (WILDCARDS, "/private-area/edit", False),
        (TIE, "/page", True),
        (GROUPS, "/admin/x", False),
        (GROUPS, "/catalogue", True),  # our group replaces `*`'s Disallow: /
        ("", "/anything", True),
    ],
)
def test_it_applies_rfc_9309_matching(text, path, allowed):
    assert protego_allows(text, path) is allowed


def test_it_measures_why_the_standard_parser_is_not_used():
    # urllib.robotparser takes the first matching line, not the longest: it refuses a page
    # the RFC allows; and it reads `*` literally, so it fetches a PDF the site refused.
    assert stdlib_allows(LONGEST_MATCH, "/shop/public/1") is False
    assert protego_allows(LONGEST_MATCH, "/shop/public/1") is True
    assert stdlib_allows(WILDCARDS, "/files/a.pdf") is True
    assert protego_allows(WILDCARDS, "/files/a.pdf") is False


def test_it_matches_groups_by_the_user_agents_product_token():
    assert robots.product_token("Salvage/0.1 (+https://example.invalid/bot)") == "Salvage"
    assert robots.product_token("MyBot") == "MyBot"
    assert Protego.parse(GROUPS).crawl_delay(robots.product_token("Salvage/0.1")) == 2


@pytest.mark.parametrize(
    "status, error_class, parsed",
    [
        (200, None, True),
        (404, None, False),  # unavailable: allow all
        (410, None, False),
        (403, None, False),  # RFC 9309 2.3.1.3: any 4xx is "unavailable"
        # RFC 9309 2.3.1.3: unreachable, complete disallow for now (the pages are deferred)
        (429, ErrorClass.ROBOTS_UNREACHABLE, False),
        (500, ErrorClass.ROBOTS_UNREACHABLE, False),
        (503, ErrorClass.ROBOTS_UNREACHABLE, False),
    ],
)
def test_it_reads_each_status_as_the_rfc_says(status, error_class, parsed):
    parser, failure = robots.interpret(status, b"User-agent: *\nDisallow: /x\n")
    assert (parser is not None) is parsed
    assert (failure.error_class if failure else None) == error_class
    if failure is not None:
        assert failure.allowed is False


def test_it_builds_the_robots_url_of_the_origin():
    assert (
        robots.robots_url("HTTP://Shop.Test:8080/a/b?c=1#d") == "http://shop.test:8080/robots.txt"
    )


def test_it_obeys_unless_the_spec_opts_out():
    assert robots.obeys({}) is True
    assert robots.obeys({"robots": {"obey": True}}) is True
    assert (
        robots.obeys({"robots": {"obey": False, "reason": "owner's written permission"}}) is False
    )


BASE = {"name": "s", "page_types": {"p": {"fields": {"a": {"selector": "h1"}}}}}


@pytest.mark.parametrize(
    "robots_value, message",
    [
        ({"obey": False}, "robots.reason: obey = false needs a stated reason"),
        ({"obey": False, "reason": "  because "}, "robots.reason: obey = false needs"),
        ({"obey": "no"}, "robots.obey: must be true or false"),
        ({"obey": False, "why": "x"}, "robots.why: unknown key"),
        ("off", "robots: must be a table"),
        # Giving up the Crawl-delay needs the same stated reason, and the opt-out it belongs to.
        ({"obey": False, "crawl_delay": False}, "robots.reason: obey = false needs"),
        ({"crawl_delay": False, "reason": "the site owner agreed"}, "robots.crawl_delay: false"),
        ({"obey": False, "reason": "owner agreed", "crawl_delay": 0}, "robots.crawl_delay: must"),
    ],
)
def test_it_refuses_an_opt_out_without_a_reason(robots_value, message):
    with pytest.raises(specs.SpecError) as info:
        specs.validate({**BASE, "robots": robots_value})
    assert message in str(info.value)


def test_it_keeps_a_stated_opt_out_and_leaves_other_specs_unchanged():
    spec = specs.validate({**BASE, "robots": {"obey": False, "reason": "site owner's consent"}})
    assert spec["robots"] == {"obey": False, "reason": "site owner's consent"}
    assert "robots" not in specs.validate(BASE)  # older specs keep their hash


def test_an_opt_out_keeps_the_crawl_delay_unless_it_says_otherwise():
    reason = "site owner's consent, ticket 7"
    opted_out = specs.validate({**BASE, "robots": {"obey": False, "reason": reason}})
    assert robots.obeys(opted_out) is False
    assert robots.keeps_crawl_delay(opted_out) is True
    assert robots.keeps_crawl_delay(specs.validate(BASE)) is True
    no_delay = specs.validate(
        {**BASE, "robots": {"obey": False, "reason": reason, "crawl_delay": False}}
    )
    assert no_delay["robots"] == {"obey": False, "reason": reason, "crawl_delay": False}
    assert robots.keeps_crawl_delay(no_delay) is False
