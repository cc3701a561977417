"""The sandbox shop over real sockets: determinism, every fault kind, listings, spec/manifest."""

from __future__ import annotations

import csv
import sys
import time
import tomllib
import types
from email.utils import parsedate_to_datetime

import httpx
import pytest
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from recovery.sandbox import server, site


def fields_of(html: str) -> dict[str, str]:
    """The shop's fields, read the way the shipped spec reads them."""
    tree = HTMLParser(html)
    node = tree.css_first("div.product")
    assert node is not None, "not a product page"
    return {
        "title": node.css_first("h1").text(strip=True),
        "price": node.css_first(".price").text(strip=True),
        "sku": node.attributes["data-sku"],
        "retailer": node.attributes["data-retailer"],
        "in_stock": node.css_first(".stock").attributes["data-in-stock"],
        "reviews": node.css_first(".reviews").text(strip=True),
    }


def product_links(html: str) -> list[str]:
    return [a.attributes["href"] for a in HTMLParser(html).css("a.product-link")]


def next_href(html: str) -> str | None:
    node = HTMLParser(html).css_first("a.next")
    return node.attributes["href"] if node else None


@pytest.fixture
def client(sandbox):
    with httpx.Client(base_url=sandbox.base_url, timeout=10) as c:
        yield c


# --- determinism -------------------------------------------------------------------------------


def test_it_serves_the_same_bytes_for_the_same_seed(make_sandbox):
    one = make_sandbox(pages=60, seed=7, faults="none")
    two = make_sandbox(pages=60, seed=7, faults="none")
    other = make_sandbox(pages=60, seed=8, faults="none")
    with httpx.Client(timeout=10) as c:
        for i in (1, 17, 60):
            a = c.get(one.product_url(i)).content
            assert a == c.get(two.product_url(i)).content
            assert a != c.get(other.product_url(i)).content
        for path in ("/listing", "/listing?offset=20&limit=10", "/category/garden"):
            assert c.get(one.url(path)).content == c.get(two.url(path)).content


def test_it_serves_the_fields_the_expectation_describes(client, sandbox):
    i = sandbox.products_with("ok")[0]
    got = fields_of(client.get(f"/product/{i}").text)
    p = site.product_for(i, seed=0, pages=sandbox.pages)
    assert got["title"] == p.title
    assert got["price"] == p.price
    assert got["sku"] == f"SKU-{i:06d}" == sandbox.expected(i).sku
    assert got["retailer"] == sandbox.expected(i).retailer
    assert got["in_stock"] in ("true", "false")
    assert int(got["reviews"]) >= 0
    assert len(product_links(client.get(f"/product/{i}").text)) == 3


def test_it_formats_prices_with_thousands_separators():
    assert site.format_price(123_450) == "£1,234.50"
    assert site.format_price(105) == "£1.05"


def test_it_assigns_faults_deterministically_per_profile():
    assert site.fault_for(40, seed=3, profile="mixed") == site.fault_for(
        40, seed=3, profile="mixed"
    )
    assert {site.fault_for(i, profile="none") for i in range(1, 500)} == {"ok"}
    consent = [i for i in range(1, 101) if site.fault_for(i, profile="consent") == "consent"]
    assert len(consent) == 10
    every = {site.fault_for(i, profile="every") for i in range(1, 200)}
    assert every == set(site.KINDS)
    with pytest.raises(ValueError, match="unknown fault profile"):
        site.fault_for(1, profile="nope")


def test_the_mixed_profile_is_a_realistic_spread():
    s = site.expected_summary(10_000, seed=0, profile="mixed")
    transient_5xx = sum(s["kinds"].get(f"server_{c}", 0) for c in (500, 502, 503, 504))
    assert 200 <= transient_5xx <= 400  # ~3%
    assert 50 <= s["kinds"]["consent"] <= 150  # ~1%
    assert 7_000 <= s["kinds"]["ok"] <= 9_500
    assert set(s["kinds"]) == set(site.KINDS) - {"trickle"}
    # One retailer in five has invalid prices on every page that yields an observation.
    assert 0.15 <= s["invalid_prices"] / s["observations"] <= 0.25
    assert s["final_states"]["committed"] == s["observations"]
    assert sum(s["final_states"].values()) == 10_000


# --- every fault kind, over real sockets ---------------------------------------------------------


def check_ok(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert r.status_code == 200
    assert fields_of(r.text)["sku"] == sandbox.expected(i).sku


def check_marker(marker: str):
    def check(c, sandbox, i):
        for _ in range(2):  # permanent: the same on every request
            r = c.get(f"/product/{i}")
            assert r.status_code == 200
            assert marker in r.text
            assert 'class="product"' not in r.text

    return check


def check_wrong_template(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert r.status_code == 200
    assert HTMLParser(r.text).css_first("div.product") is None
    assert sandbox.expected(i).sku in r.text  # same data, new markup


def check_empty_shell(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert r.status_code == 200
    tree = HTMLParser(r.text)
    assert tree.css_first("div#app") is not None and tree.css_first("script") is not None
    assert len(tree.body.text(strip=True)) < 40


def check_status(code: int):
    def check(c, sandbox, i):
        assert [c.get(f"/product/{i}").status_code for _ in range(3)] == [code] * 3

    return check


def check_transient(code: int, k: int):
    def check(c, sandbox, i):
        assert [c.get(f"/product/{i}").status_code for _ in range(k)] == [code] * k
        check_ok(c, sandbox, i)
        check_ok(c, sandbox, i)

    return check


def check_retry_after_seconds(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "2"
    check_ok(c, sandbox, i)


def check_retry_after_date(c, sandbox, i):
    before = time.time()
    r = c.get(f"/product/{i}")
    assert r.status_code == 429
    when = parsedate_to_datetime(r.headers["Retry-After"]).timestamp()
    assert before + 2 <= when <= time.time() + 4
    check_ok(c, sandbox, i)


def check_reset(c, sandbox, i):
    for _ in range(2):
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            c.get(f"/product/{i}")
    check_ok(c, sandbox, i)


def check_slow(c, sandbox, i):
    with pytest.raises(httpx.ReadTimeout):
        c.get(f"/product/{i}", timeout=0.3)
    check_ok(c, sandbox, i)


def check_trickle(c, sandbox, i):
    # Each chunk arrives inside a 1 s read timeout, yet the response takes trickle_seconds:
    # only a total deadline catches it.
    start = time.monotonic()
    r = c.get(f"/product/{i}", timeout=httpx.Timeout(10, read=1.0))
    assert r.status_code == 200
    assert time.monotonic() - start >= 0.9 * sandbox.shop.trickle_seconds
    start = time.monotonic()
    check_ok(c, sandbox, i)  # transient: the next response is fast
    assert time.monotonic() - start < sandbox.shop.trickle_seconds


def check_oversized(c, sandbox, i):
    with c.stream("GET", f"/product/{i}") as r:
        assert r.status_code == 200
        assert "content-length" not in r.headers  # chunked: the cap must count bytes
        size = sum(len(chunk) for chunk in r.iter_raw())
    assert size > sandbox.shop.oversized_bytes > 5_000_000


def check_bad_encoding(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    with pytest.raises(UnicodeDecodeError):
        r.content.decode("utf-8")


def check_redirect(hops: int):
    def check(c, sandbox, i):
        r = c.get(f"/product/{i}", follow_redirects=True)
        assert r.status_code == 200
        assert len(r.history) == hops
        assert r.history[0].status_code in (301, 302)
        assert r.url.path == f"/p/{i}"
        assert fields_of(r.text)["sku"] == sandbox.expected(i).sku

    return check


def check_redirect_loop(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert r.status_code == 302
    with pytest.raises(httpx.TooManyRedirects):
        c.get(f"/product/{i}", follow_redirects=True)


def check_price_na(c, sandbox, i):
    r = c.get(f"/product/{i}")
    assert fields_of(r.text)["price"] == "N/A"


CHECKS = {
    "ok": check_ok,
    "consent": check_marker('id="consent-banner"'),
    "login": check_marker('id="login"'),
    "challenge": check_marker("verify you are human"),
    "wrong_template": check_wrong_template,
    "empty_shell": check_empty_shell,
    "not_found": check_status(404),
    "gone": check_status(410),
    "rate_limited": check_retry_after_seconds,
    "rate_limited_date": check_retry_after_date,
    "server_500": check_transient(500, 2),
    "server_502": check_transient(502, 2),
    "server_503": check_transient(503, 2),
    "server_504": check_transient(504, 2),
    "server_persistent": check_status(503),
    "reset": check_reset,
    "slow": check_slow,
    "trickle": check_trickle,
    "oversized": check_oversized,
    "bad_encoding": check_bad_encoding,
    "redirect": check_redirect(1),
    "redirect_chain": check_redirect(3),
    "redirect_loop": check_redirect_loop,
    "price_na": check_price_na,
}


def test_every_fault_kind_has_a_check():
    assert set(CHECKS) == set(site.KINDS)


@pytest.mark.parametrize("kind", sorted(site.KINDS))
def test_each_fault_kind_misbehaves_as_described(make_sandbox, kind):
    # A per-kind profile: one product in ten has the fault, the rest are normal.
    sb = make_sandbox(pages=30, faults=kind if kind != "ok" else "none", trickle_seconds=1.5)
    faulty = sb.products_with(kind)
    assert faulty, kind
    with httpx.Client(base_url=sb.base_url, timeout=10) as c:
        CHECKS[kind](c, sb, faulty[0])
        if kind != "ok":
            normal = next(i for i in range(1, sb.pages + 1) if sb.fault(i) == "ok")
            check_ok(c, sb, normal)
    assert sb.expected(faulty[0]).kind == kind


def test_the_every_profile_serves_each_kind_on_one_server(client, sandbox):
    for kind in ("consent", "not_found", "server_503", "redirect", "price_na"):
        CHECKS[kind](client, sandbox, sandbox.products_with(kind)[0])


def test_transient_counters_reset_between_tests(client, sandbox):
    i = sandbox.products_with("server_500")[0]
    assert client.get(f"/product/{i}").status_code == 500  # fresh despite the test above


def test_expected_outcomes_follow_the_retry_table():
    assert site.KINDS["server_503"].final_state == "committed"
    assert site.KINDS["server_persistent"].final_state == "dead"
    assert site.KINDS["gone"].final_state == "gone"
    assert site.KINDS["consent"].final_state == "quarantined"
    for kind in site.KINDS.values():
        assert kind.observation == (kind.final_state == "committed")
        assert kind.transient < 5  # below the shipped spec's max_attempts


def test_an_unknown_product_is_a_404(client, sandbox):
    assert client.get(f"/product/{sandbox.pages + 1}").status_code == 404
    assert client.get("/product/abc").status_code == 404


# --- the bad retailer (the recovery-batch example) --------------------------------------------


def test_the_bad_retailer_serves_invalid_prices_until_switched_off(make_sandbox):
    sb = make_sandbox(pages=40, faults="bad_retailer")
    bad = site.bad_retailer_for(0)
    theirs = [i for i in range(1, 41) if sb.expected(i).retailer == bad]
    others = [i for i in range(1, 41) if sb.expected(i).retailer != bad]
    assert theirs and others
    assert sb.summary()["invalid_prices"] == len(theirs)
    with httpx.Client(base_url=sb.base_url, timeout=10) as c:
        assert fields_of(c.get(f"/product/{theirs[0]}").text)["price"] == site.BAD_PRICE
        assert fields_of(c.get(f"/product/{others[0]}").text)["price"] != site.BAD_PRICE
        state = c.post("/_sandbox/faults", json={"bad_retailer": False}).json()
        assert state["bad_retailer"] is False
        repaired = fields_of(c.get(f"/product/{theirs[0]}").text)["price"]
        assert repaired == site.product_for(theirs[0], pages=40).price
        assert sb.summary()["invalid_prices"] == 0
        assert c.post("/_sandbox/faults", json={"profile": "bogus"}).status_code == 400
        assert c.post("/_sandbox/faults", json={"profile": "consent"}).json()["profile"] == (
            "consent"
        )
    assert sb.current_profile() == "consent"


# --- listings and categories ----------------------------------------------------------------


def walk_cursor(c, start: str = "/listing?limit=10", on_page=None) -> list[str]:
    skus, href, pages = [], start, 0
    while href:
        r = c.get(href)
        assert r.status_code == 200
        tree = HTMLParser(r.text)
        skus += [li.attributes["data-sku"] for li in tree.css("li.item")]
        href = next_href(r.text)
        pages += 1
        if on_page:
            on_page(pages)
    return skus


def test_the_cursor_listing_walks_every_product_exactly_once(make_sandbox):
    sb = make_sandbox(pages=95, faults="none")
    with httpx.Client(base_url=sb.base_url, timeout=10) as c:
        skus = walk_cursor(c)
        assert sorted(skus) == sorted(site.sku_for(i) for i in range(1, 96))
        assert len(skus) == len(set(skus)) == 95

        # Items added at the front during a walk do not shift a keyset cursor.
        def insert_midway(pages_seen: int) -> None:
            if pages_seen == 3:
                c.post("/_sandbox/insert?n=4")

        skus = walk_cursor(c, on_page=insert_midway)
        assert len(skus) == len(set(skus)) == 95
        first = HTMLParser(c.get("/listing?limit=3").text).css("li.item")
        assert [li.attributes["data-sku"] for li in first] == [
            site.sku_for(99),
            site.sku_for(98),
            site.sku_for(97),
        ]
        assert c.get("/listing?cursor=garbage").status_code == 400


def test_the_cursor_is_opaque(client):
    href = next_href(client.get("/listing").text)
    assert href is not None and "cursor=" in href
    cursor = href.split("cursor=")[1]
    assert not cursor.isdigit()


def walk_offset(c, limit: int = 10) -> list[str]:
    skus, href = [], f"/listing?offset=0&limit={limit}"
    while href:
        r = c.get(href)
        skus += [li.attributes["data-sku"] for li in HTMLParser(r.text).css("li.item")]
        href = next_href(r.text)
    return skus


def test_the_offset_listing_is_stable_without_insertions(make_sandbox):
    sb = make_sandbox(pages=45, faults="none")
    with httpx.Client(base_url=sb.base_url, timeout=10) as c:
        skus = walk_offset(c)
    assert len(skus) == len(set(skus)) == 45


def test_the_offset_listing_shifts_when_items_are_added(make_sandbox):
    sb = make_sandbox(pages=45, faults="none", listing_insert_every=2)
    with httpx.Client(base_url=sb.base_url, timeout=10) as c:
        skus = walk_offset(c)
        state = c.get("/_sandbox/state").json()
    # Every second request put a new item at the front: each pushes the item at the page
    # boundary onto the next page, so the walk sees it twice and never sees the new items.
    assert state["inserted"] >= 2
    assert len(skus) > len(set(skus))
    assert set(skus) == {site.sku_for(i) for i in range(1, 46)}
    assert state["visible"] == 45 + state["inserted"]


def test_categories_link_every_product_exactly_once(client, sandbox):
    index = HTMLParser(client.get("/categories").text).css("a.category-link")
    hrefs = [a.attributes["href"] for a in index]
    assert len(hrefs) == len(site.CATEGORIES)
    seen: list[str] = []
    for href in hrefs:
        seen += product_links(client.get(href).text)
    assert sorted(seen) == sorted(f"/product/{i}" for i in range(1, sandbox.pages + 1))
    assert client.get("/category/nope").status_code == 404


# --- the server, the command, and the files it writes --------------------------------------


def test_build_app_mounts_simulators_that_exist(monkeypatch):
    from aiohttp import web

    fake = types.ModuleType("recovery.sandbox.tornado")

    def make_app(**options):
        app = web.Application()

        async def hello(request):
            return web.json_response({"sim": "tornado", **options})

        app.router.add_get("/hello", hello)
        return app

    fake.make_app = make_app
    monkeypatch.setitem(sys.modules, "recovery.sandbox.tornado", fake)
    monkeypatch.setattr(
        server,
        "SIMULATORS",
        {"tornado": "recovery.sandbox.tornado", "nothere": "recovery.sandbox.nothere_xyz"},
    )
    app = server.build_app(pages=5, simulators={"tornado": {"flavour": "x"}, "nothere": {}})
    assert list(app[server.SIMULATORS_KEY]) == ["tornado"]
    from recovery.sandbox.runner import start_in_thread

    served = start_in_thread(app)
    try:
        with httpx.Client(base_url=served.base_url, timeout=10) as c:
            assert c.get("/tornado/hello").json() == {"sim": "tornado", "flavour": "x"}
            assert c.get("/product/1").status_code == 200
    finally:
        served.stop()


def test_the_spec_matches_the_shop_and_passes_spec_validation():
    pytest.importorskip("django")
    from recovery.intake import specs

    for rule in server.PARTITION_RULES:
        spec = specs.validate(tomllib.loads(server.shop_spec_toml(partition_rule=rule)))
        assert spec["provider"] == "direct"
        assert spec["partition"]["rule"] == rule
        product = spec["page_types"]["product"]
        assert product["expect"]["selector"] == "div.product"
        assert {"title", "price", "sku", "retailer"} <= set(product["fields"])
        kinds = {r["kind"] for r in spec["rules"]}
        assert {"range", "partition_invalid_share", "coverage"} <= kinds
    with pytest.raises(ValueError):
        server.shop_spec_toml(partition_rule="nope")


@pytest.mark.slow
def test_the_command_serves_and_writes_a_spec_and_manifest(sandbox_process, tmp_path):
    from recovery.intake import specs

    spec_path, manifest_path = tmp_path / "shop.toml", tmp_path / "shop.csv"
    sb = sandbox_process(
        "--spec-out",
        str(spec_path),
        "--manifest-out",
        str(manifest_path),
        pages=30,
        seed=4,
        faults="mixed",
    )
    assert sb.base_url.startswith("http://127.0.0.1:") and not sb.base_url.endswith(":0")
    spec = specs.validate(specs.parse_file(spec_path))
    assert spec["name"] == "sandbox-shop"
    with open(manifest_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 30
    assert rows[0] == {
        "url": f"{sb.base_url}/product/1",
        "page_type": "product",
        "partition": site.retailer_for(1, seed=4),
    }
    ok = next(i for i in range(1, 31) if sb.fault(i) == "ok")
    with httpx.Client(timeout=10) as c:
        r = c.get(rows[ok - 1]["url"])
        assert r.status_code == 200
        assert fields_of(r.text)["retailer"] == rows[ok - 1]["partition"]
    from tests.support.sandbox import stop_process

    assert stop_process(sb.process) == 0  # SIGTERM is a clean exit


@pytest.mark.slow
def test_the_command_listens_on_retailer_hosts(sandbox_process, tmp_path):
    from recovery.intake import specs

    spec_path, manifest_path = tmp_path / "shop.toml", tmp_path / "shop.csv"
    sandbox_process(
        "--retailer-hosts", "--spec-out", str(spec_path), "--manifest-out", str(manifest_path),
        pages=10, faults="none",
    )  # fmt: skip
    assert specs.validate(specs.parse_file(spec_path))["partition"]["rule"] == "host"
    with open(manifest_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    with httpx.Client(timeout=10) as c:
        for row in rows:
            assert httpx.URL(row["url"]).host == site.retailer_host(row["partition"])
            assert c.get(row["url"]).status_code == 200


def test_the_command_refuses_an_unknown_profile():
    import subprocess

    from tests.support.sandbox import ROOT

    proc = subprocess.run(
        [sys.executable, "manage.py", "sandbox", "--faults", "bogus", "--port", "0"],
        cwd=ROOT,
        env={"SALVAGE_INSECURE_DEV_KEY": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--faults" in proc.stderr


def test_expected_outcomes_agree_with_the_engines_retry_table():
    failures = pytest.importorskip("recovery.failures")
    state_of = {"quarantine": "quarantined", "gone": "gone", "dead": "dead"}
    for kind in site.KINDS.values():
        if kind.error_class is None:
            assert kind.final_state == "committed"
            continue
        action = str(failures.rule_for(kind.error_class).action)
        if action == "retry":
            # Transient kinds succeed within the budget; permanent ones exhaust it.
            assert kind.final_state == ("committed" if kind.transient else "dead"), kind.name
        else:
            assert state_of[action] == kind.final_state, kind.name


def test_retailer_hosts_serve_the_shop_for_host_partitioning(make_sandbox):
    sb = make_sandbox(pages=20, faults="none", retailer_hosts=True)
    rows = server.manifest_rows(sb.base_url, pages=20, retailer_hosts=True)
    hosts = {httpx.URL(row["url"]).host: row["partition"] for row in rows}
    assert len(set(hosts.values())) == len(hosts) > 1  # one host per retailer
    with httpx.Client(timeout=10) as c:
        for row in rows[:6]:
            r = c.get(row["url"])
            assert r.status_code == 200
            assert fields_of(r.text)["retailer"] == row["partition"]
            assert httpx.URL(row["url"]).host == site.retailer_host(row["partition"])
        assert c.get(sb.retailer_product_url(3)).status_code == 200


def test_version_2_of_the_spec_reads_the_bad_retailers_new_template(make_sandbox):
    # Seed 002's worked example: the bad retailer's pages changed template; version 1's
    # selector reads the price change (negative), version 2's reads the price, on both
    # templates, and both spec versions pass the spec checks.
    from recovery.fetch import extraction
    from recovery.intake import specs

    v1, v2 = (
        specs.validate(tomllib.loads(server.shop_spec_toml(version=n)))["page_types"]["product"]
        for n in (1, 2)
    )
    sb = make_sandbox(pages=40, faults="bad_retailer")
    bad = site.bad_retailer_for(0)
    theirs = next(i for i in range(1, 41) if sb.expected(i).retailer == bad)
    others = next(i for i in range(1, 41) if sb.expected(i).retailer != bad)
    with httpx.Client(base_url=sb.base_url, timeout=10) as c:
        new_page = HTMLParser(c.get(f"/product/{theirs}").text)
        old_page = HTMLParser(c.get(f"/product/{others}").text)
    assert new_page.css_first(".price-now") is not None  # the redesign is served
    assert old_page.css_first(".price-now") is None
    price = lambda tree, spec: extraction.extract_fields(tree, spec["fields"])["price"]  # noqa: E731
    assert price(new_page, v1) == extraction.parse_decimal(site.BAD_PRICE)
    assert price(new_page, v2) == extraction.parse_decimal(site.product_for(theirs, pages=40).price)
    for spec in (v1, v2):
        assert price(old_page, spec) == extraction.parse_decimal(
            site.product_for(others, pages=40).price
        )
    with pytest.raises(ValueError, match="scraper version"):
        server.shop_spec_toml(version=3)
