"""Identities: two spellings of one page are one task; different tuples never collide."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from recovery import keys

UNRESERVED = string.ascii_letters + string.digits + "-._~"

labels = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12)
hosts = st.lists(labels, min_size=1, max_size=3).map(".".join).map(lambda h: h + ".test")
segments = st.text(UNRESERVED + "!$&'()*+,;=:@", min_size=0, max_size=12)
paths = st.lists(segments, min_size=0, max_size=4).map(lambda s: "/" + "/".join(s))
param_keys = st.text(string.ascii_lowercase + string.digits + "_", min_size=1, max_size=8).filter(
    lambda k: not keys._is_tracking(k)
)
param_values = st.text(UNRESERVED, min_size=0, max_size=8)
queries = st.lists(st.tuples(param_keys, param_values), min_size=0, max_size=5)
schemes = st.sampled_from(["http", "https"])
tracking = st.lists(
    st.tuples(
        st.sampled_from(["utm_source", "UTM_Medium", "utm_campaign", "gclid", "fbclid", "_ga"]),
        param_values,
    ),
    min_size=1,
    max_size=3,
)


def build(
    scheme: str,
    host: str,
    path: str,
    query: list[tuple[str, str]],
    *,
    port: str = "",
    fragment: str = "",
) -> str:
    q = "&".join(f"{k}={v}" for k, v in query)
    return f"{scheme}://{host}{port}{path}" + (f"?{q}" if q else "") + fragment


def random_case(data, text: str) -> str:
    flips = data.draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if f else c for c, f in zip(text, flips, strict=True))


def percent_encode_some(data, path: str) -> str:
    """Percent-encode some unreserved characters (in either hex case): same resource."""
    out = []
    for ch in path:
        if ch in UNRESERVED and data.draw(st.booleans()):
            code = f"%{ord(ch):02X}"
            out.append(code.lower() if data.draw(st.booleans()) else code)
        else:
            out.append(ch)
    return "".join(out)


@given(st.data(), schemes, hosts, paths, queries)
def test_it_gives_two_spellings_of_one_url_one_key(data, scheme, host, path, query):
    plain = build(scheme, host, path, query)
    default_port = {"http": ":80", "https": ":443"}[scheme]
    shuffled = data.draw(st.permutations(query))
    trackers = data.draw(tracking)
    mixed = shuffled + trackers
    respelled = build(
        random_case(data, scheme),
        random_case(data, host),
        percent_encode_some(data, path),
        data.draw(st.permutations(mixed)),
        port=data.draw(st.sampled_from(["", default_port])),
        fragment=data.draw(st.sampled_from(["", "#", "#top", "#a/b?c"])),
    )
    assert keys.canonical_url(plain) == keys.canonical_url(respelled)
    assert keys.task_key("ds", plain, "w1", "product") == keys.task_key(
        "ds", respelled, "w1", "product"
    )


@given(schemes, hosts, paths, queries)
def test_it_is_idempotent(scheme, host, path, query):
    once = keys.canonical_url(build(scheme, host, path, query))
    assert keys.canonical_url(once) == once


@given(st.data(), schemes, hosts, paths)
def test_it_keeps_non_default_ports_and_real_path_differences(data, scheme, host, path):
    url = build(scheme, host, path, [])
    assert keys.canonical_url(build(scheme, host, path, [], port=":8443")) != keys.canonical_url(
        url
    )
    assert keys.canonical_url(url + "x") != keys.canonical_url(url)


@given(
    st.tuples(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6)),
    st.tuples(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6)),
    hosts,
)
def test_it_never_collides_across_datasets_windows_or_page_types(a, b, host):
    assume(a != b)
    url = f"http://{host}/p"
    assert keys.task_key(a[0], url, a[1], a[2]) != keys.task_key(b[0], url, b[1], b[2])
    assert keys.observation_key(*a) != keys.observation_key(*b)


def test_it_length_prefixes_parts_so_concatenation_cannot_collide():
    url = "http://x.test/"
    assert keys.task_key("ab", url, "c", "p") != keys.task_key("a", url, "bc", "p")
    assert keys.task_key("d", url, "w", "pa") != keys.task_key("d", url, "wp", "a")
    assert keys.observation_key("d", "e1", "w") != keys.observation_key("d", "e", "1w")


def test_it_keeps_tasks_and_observations_in_separate_key_spaces():
    # An observation key must never equal a task key, even for look-alike parts.
    assert keys.task_key("d", "http://x.test/", "w", "p") != keys.observation_key(
        "d", "http://x.test/", "w"
    )


@given(hosts, paths, st.text(min_size=1, max_size=10))
def test_it_separates_different_windows_for_one_url(host, path, window):
    url = f"https://{host}{path}"
    assert keys.task_key("d", url, window, "p") != keys.task_key("d", url, window + "x", "p")


def test_it_removes_tracking_parameters_and_sorts_the_query():
    assert (
        keys.canonical_url("HTTPS://Shop.Test:443/a/%7Eb?z=1&utm_source=n&a=2&gclid=x#frag")
        == "https://shop.test/a/~b?a=2&z=1"
    )


def test_it_encodes_spaces_and_non_ascii_consistently():
    assert keys.canonical_url("http://x.test/a b") == keys.canonical_url("http://x.test/a%20b")
    assert keys.canonical_url("http://x.test/é") == keys.canonical_url("http://x.test/%C3%A9")
    assert keys.canonical_url("http://Bücher.test/") == "http://xn--bcher-kva.test/"


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "ftp://x.test/file",
        "javascript:alert(1)",
        "mailto:a@x.test",
        "//x.test/no-scheme",
        "x.test/no-scheme",
        "http://",
        "http:///path",
        "http://[::1/",
        "http://x.test:99999/",
        "http://x.test:0/",
        "http://x.test:port/",
        "http://exa mple.test/",
        "http://a..b/",
        "http://ex<am>ple.test/",
        "http://user:secret@x.test/",
        "http://x.test/a\nb",
        None,
        42,
    ],
)
def test_it_refuses_invalid_urls(url):
    with pytest.raises(keys.InvalidURL):
        keys.canonical_url(url)


def test_property_tests_run_without_a_deadline_or_the_too_slow_check():
    """tests/conftest.py loads the CI profile: a loaded machine cannot fail them at random."""
    from hypothesis import HealthCheck

    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


def test_a_url_of_exactly_the_limit_is_accepted_one_more_is_not():
    head = "http://a.test/"
    exact = head + "x" * (keys.MAX_URL_LENGTH - len(head))
    assert keys.canonical_url(exact) == exact
    with pytest.raises(keys.InvalidURL, match="8,193 characters, over the 8,192-character limit"):
        keys.canonical_url(exact + "x")


@pytest.mark.parametrize("code", [*range(0x20), 0x7F])
def test_every_control_character_is_refused(code):
    with pytest.raises(keys.InvalidURL, match="control character"):
        keys.canonical_url(f"http://a.test/a{chr(code)}b")


def test_it_computes_the_same_key_from_a_canonical_url():
    url = "http://X.test:80/a?b=1&a=2"
    assert keys.task_key("d", url, "w", "p") == keys.task_key_from_canonical(
        "d", keys.canonical_url(url), "w", "p"
    )


def clean_or_tricky(clean: str, tricky: str, size: int):
    """Mostly text the fast path takes, sometimes one character it must hand over."""
    plain = st.text(clean, max_size=size)
    odd = st.tuples(plain, st.sampled_from(tricky), plain).map("".join)
    return st.one_of(plain, plain, plain, plain, plain, odd)


QUERY_CLEAN = string.ascii_letters[:6] + "UTM_" + string.digits[:3] + ".-~"
url_parts = st.tuples(
    st.sampled_from(["http", "HTTP", "https", "hTTps", "http", "https", "ftp", ""]),
    st.one_of(
        hosts.map(str.upper),
        hosts,
        clean_or_tricky(string.ascii_letters + "._-", "@:[]é%. ", 12),
    ),
    st.sampled_from(["", "", "", ":80", ":0443", ":8080", ":", ":0", ":99999", ":x"]),
    clean_or_tricky(string.ascii_letters + "/:@!$&'()*+,;=._~-", "%é #?[]", 12),
    st.lists(
        st.tuples(
            clean_or_tricky(QUERY_CLEAN, "=+%é&/", 4), clean_or_tricky(QUERY_CLEAN, "=+%é/?#", 4)
        ),
        max_size=4,
    ),
    st.sampled_from(["", "#", "#a?b=c", "#\t", "#é"]),
)


@settings(max_examples=400)
@given(url_parts)
def test_the_fast_path_agrees_with_the_full_parser(parts):
    scheme, host, port, path, query, fragment = parts
    q = "&".join(f"{k}={v}" for k, v in query)
    url = f"{scheme}://{host}{port}/{path}" + (f"?{q}" if query else "") + fragment
    fast = keys._canonical_simple(url)
    try:
        full = keys._canonical_full(url)
    except keys.InvalidURL:
        full = None
    if fast is not None:
        assert fast == full


@given(schemes, hosts, paths, queries, st.sampled_from(["", ":80", ":443", ":8080", ":00081"]))
def test_the_fast_path_takes_the_common_spellings(scheme, host, path, query, port):
    url = build(scheme, host, path, query, port=port, fragment="#x")
    assume("=" not in "".join(v for _, v in query))
    fast = keys._canonical_simple(url)
    assert fast is not None
    assert fast == keys._canonical_full(url)


@pytest.mark.parametrize(
    "url",
    [
        "HTTP://X.TEST:80/a?b=1&a=2#f",
        "hTTps://Shop.Test:0443/p",
        "http://x.test:8080/a?x",
        "http://x.test/a?x=&y",
        "http://x.test/?",
        "http://x.test/a?=v",
        "http://x.test/a?a=b=c",
        "http://x.test/a?a+b=c+d",
        "http://x.test./p",
        "http://x.test/a?utm_source=1&UTM_x=2&gclid=3&keep=4",
        "http://x.test/a?&&b=1&",
        "http://x.test/p+q;r=s",
        "https://x.test:443",
        "http://x.test:0/",
        "http://x.test:65536/",
        "http://a..b/",
        "http://x.test/a#b?c=1",
        "http://x.test/a?b#c?d",
        "http://127.0.0.1:8765/product/1",
    ],
)
def test_the_fast_path_agrees_on_tricky_spellings(url):
    fast = keys._canonical_simple(url)
    try:
        full = keys._canonical_full(url)
    except keys.InvalidURL:
        assert fast is None
        return
    assert fast in (None, full)
    assert keys.canonical_url(url) == full
