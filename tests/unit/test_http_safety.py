"""Outbound safety and fetch limits of recovery.fetch's Fetcher, over real sockets to a server.

Every fetch test runs against each transport (aiohttp driven directly, the default; httpx over
httpx-aiohttp; httpx's own), since all must keep the same guarantees. The test settings
allow-list 127.0.0.0/8; tests that need a refusal pass their own (narrower or empty) allow-list.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import itertools
import re
import socket
import threading
import time

import pytest
from aiohttp import web

from recovery.fetch.allowlist import parse_networks
from recovery.fetch.errors import FetchError
from recovery.fetch.fetcher import Fetcher
from recovery.fetch.guard import AddressGuard, numeric_host, refusal_reason
from recovery.fetch.hostgate import HostGate
from recovery.outcomes import ErrorClass
from recovery.sandbox.runner import start_in_thread

TRANSPORTS = ["aiohttp", "httpx-aiohttp", "httpcore"]


class Hits:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.hosts: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.starts: list[float] = []


def make_app(hits: Hits) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        hits.paths.append(request.path)
        hits.hosts.append(request.headers.get("Host", ""))
        return web.Response(text="<h1>ok</h1>", content_type="text/html")

    async def redirect(request: web.Request) -> web.Response:
        hits.paths.append(request.path)
        raise web.HTTPFound(request.query["to"])

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def chain(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        raise web.HTTPFound(f"/chain/{n - 1}" if n > 0 else "/page")

    async def big(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "text/html"
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for _ in range(64):
                await response.write(b"x" * 16384)
            await response.write_eof()
        except ConnectionError:
            pass
        return response

    async def declared_big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 200_000, content_type="text/html")

    async def bomb(request: web.Request) -> web.Response:
        body = gzip.compress(b"\0" * 5_000_000)
        return web.Response(
            body=body, headers={"Content-Encoding": "gzip", "Content-Type": "text/html"}
        )

    async def bad_gzip(request: web.Request) -> web.Response:
        return web.Response(
            body=b"not gzip at all" * 10,
            headers={"Content-Encoding": "gzip", "Content-Type": "text/html"},
        )

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "text/html"
        await response.prepare(request)
        try:
            for _ in range(40):
                await response.write(b"<p>drip</p>")
                await asyncio.sleep(0.1)
            await response.write_eof()
        except ConnectionError:
            pass
        return response

    async def stall(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_type = "text/html"
        await response.prepare(request)
        try:
            await response.write(b"<p>then nothing")
            await asyncio.sleep(3)
        except ConnectionError:
            pass
        return response

    async def set_cookie(request: web.Request) -> web.Response:
        response = web.HTTPFound("/echo")
        response.set_cookie("session", "s3cret-value")
        raise response

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "cookie": request.headers.get("Cookie", ""),
                "ua": request.headers.get("User-Agent", ""),
                "host": request.headers.get("Host", ""),
            }
        )

    async def slow(request: web.Request) -> web.Response:
        hits.in_flight += 1
        hits.starts.append(time.monotonic())
        hits.max_in_flight = max(hits.max_in_flight, hits.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            hits.in_flight -= 1
        return web.Response(text="<p>slow</p>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/r", redirect)
    app.router.add_get("/loop", loop)
    app.router.add_get("/chain/{n}", chain)
    app.router.add_get("/big", big)
    app.router.add_get("/declared-big", declared_big)
    app.router.add_get("/bomb", bomb)
    app.router.add_get("/bad-gzip", bad_gzip)
    app.router.add_get("/trickle", trickle)
    app.router.add_get("/stall", stall)
    app.router.add_get("/set-cookie", set_cookie)
    app.router.add_get("/echo", echo)
    app.router.add_get("/slow", slow)
    return app


@pytest.fixture(scope="module")
def server():
    hits = Hits()
    served = start_in_thread(make_app(hits))
    served.hits = hits
    yield served
    served.stop()


@pytest.fixture(scope="module")
def server2():
    """A server on 127.0.0.2 only: reachable through a narrow allow-list of 127.0.0.2/32."""
    hits = Hits()
    served = start_in_thread(make_app(hits), host="127.0.0.2")
    served.hits = hits
    yield served
    served.stop()


def fetch(url: str, **options) -> object:
    async def go():
        fetcher = Fetcher(**options)
        try:
            return await fetcher.fetch(url)
        finally:
            await fetcher.aclose()

    return asyncio.run(go())


def fetch_error(url: str, **options) -> FetchError:
    with pytest.raises(FetchError) as info:
        fetch(url, **options)
    return info.value


# --- addresses (pure) -------------------------------------------------------------------------

LOOPBACK_FORMS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "2130706433",
    "0x7f.0.0.1",
    "0x7f000001",
    "017700000001",
    "0177.0.0.1",
    "127.0.0.1.",
]


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_it_reads_every_numeric_ipv4_spelling(host):
    assert numeric_host(host) == ipaddress.IPv4Address("127.0.0.1")


@pytest.mark.parametrize("host", [h for h in LOOPBACK_FORMS if not h.endswith(".")])
def test_numeric_spellings_agree_with_the_c_resolver(host):
    # The guard must read a host exactly as the socket layer would, or a spelling slips by.
    infos = socket.getaddrinfo(host, 80, socket.AF_INET, socket.SOCK_STREAM)
    assert {info[4][0] for info in infos} == {"127.0.0.1"}


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("[::ffff:7f00:1]", "::ffff:127.0.0.1"),
        ("fe80::1%eth0", "fe80::1"),
        ("100.64.0.1", "100.64.0.1"),
        ("10.1", "10.0.0.1"),
    ],
)
def test_it_reads_ipv6_and_other_literals(host, expected):
    assert numeric_host(host) == ipaddress.ip_address(expected)


@pytest.mark.parametrize("host", ["example.com", "1e100", "0x", "08.0.0.1", "1.2.3.4.5", "256.1"])
def test_names_are_not_numeric(host):
    if host == "0x":
        assert numeric_host(host) == ipaddress.IPv4Address("0.0.0.0")  # inet_aton reads 0
        return
    assert numeric_host(host) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 carrying 127.0.0.1
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 carrying 169.254.169.254
        ("64:ff9b::7f00:1", "reserved"),  # NAT64 carrying 127.0.0.1
        ("::127.0.0.1", "reserved"),  # IPv4-compatible (deprecated)
        ("2001::1", "private"),  # Teredo
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "shared address space (CGNAT)"),
        ("100.127.255.254", "shared address space (CGNAT)"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),  # 240/4 is listed as private as well as reserved
        ("198.18.0.1", "private"),
        ("192.0.2.1", "private"),
    ],
)
def test_it_refuses_non_public_addresses(address, reason):
    assert refusal_reason(ipaddress.ip_address(address), ()) == reason


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "2002:808:808::1"]
)
def test_it_allows_public_addresses(address):
    assert refusal_reason(ipaddress.ip_address(address), ()) is None


def test_the_allow_list_admits_its_networks_only():
    allowed = parse_networks(["127.0.0.0/8", "10.1.0.0/16"])
    assert refusal_reason(ipaddress.ip_address("127.0.0.1"), allowed) is None
    assert refusal_reason(ipaddress.ip_address("::ffff:127.0.0.1"), allowed) is None
    assert refusal_reason(ipaddress.ip_address("10.1.2.3"), allowed) is None
    assert refusal_reason(ipaddress.ip_address("10.2.0.1"), allowed) == "private"
    assert refusal_reason(ipaddress.ip_address("::1"), allowed) == "loopback"


@pytest.mark.parametrize(
    "entry",
    [
        "10.0.0.0/33",
        "127.0.0.1:0",
        "127.0.0.1:70000",
        "127.0.0.1:http",
        "[::1",
        "[::1]x",
        "[::1]:",
        "host:80",
    ],
)
def test_a_bad_allow_list_entry_is_named(entry):
    with pytest.raises(ValueError, match=re.escape(repr(entry))):
        parse_networks(["127.0.0.0/8", entry])


@pytest.mark.parametrize(
    ("entry", "network", "port"),
    [
        ("127.0.0.1:8765", "127.0.0.1/32", 8765),
        ("10.0.0.0/8:443", "10.0.0.0/8", 443),
        ("[::1]:8765", "::1/128", 8765),
        ("[fd00::]/8:443", "fd00::/8", 443),
        ("[::1]", "::1/128", None),
        ("10.0.0.0/8", "10.0.0.0/8", None),
        ("::1/128", "::1/128", None),
        ("::1", "::1/128", None),  # bare IPv6: its colons are the address's, never a port
    ],
)
def test_allow_list_entries_read_network_and_port(entry, network, port):
    (parsed,) = parse_networks([entry])
    assert (str(parsed.network), parsed.port) == (network, port)
    assert parse_networks([str(parsed)]) == (parsed,)  # the written form reads back


def test_an_entry_with_a_port_admits_that_port_only():
    allowed = parse_networks(["127.0.0.1:8765", "10.0.0.0/8:443", "[::1]:8765", "192.168.0.0/16"])
    ip = ipaddress.ip_address
    assert refusal_reason(ip("127.0.0.1"), allowed, 8765) is None
    assert refusal_reason(ip("::ffff:127.0.0.1"), allowed, 8765) is None
    assert refusal_reason(ip("127.0.0.1"), allowed, 5432).startswith("loopback (port 5432 not")
    assert "allowed port(s): 8765" in refusal_reason(ip("127.0.0.1"), allowed, 6379)
    assert refusal_reason(ip("127.0.0.2"), allowed, 8765) == "loopback"
    assert refusal_reason(ip("127.0.0.1"), allowed, None) is not None  # unknown port: refused
    assert refusal_reason(ip("10.9.8.7"), allowed, 443) is None
    assert refusal_reason(ip("10.9.8.7"), allowed, 80) is not None
    assert refusal_reason(ip("::1"), allowed, 8765) is None
    assert refusal_reason(ip("::1"), allowed, 8766) is not None
    # A network alone still means every port.
    assert refusal_reason(ip("192.168.3.4"), allowed, 1) is None
    assert refusal_reason(ip("192.168.3.4"), allowed, 65535) is None


# --- refusals over real sockets ---------------------------------------------------------------

REFUSED_URLS = [
    "http://127.0.0.1:{port}/page",
    "http://127.1:{port}/page",
    "http://2130706433:{port}/page",
    "http://0x7f.0.0.1:{port}/page",
    "http://017700000001:{port}/page",
    "http://0177.0.0.1:{port}/page",
    "http://[::ffff:127.0.0.1]:{port}/page",
    "http://[::1]:{port}/page",
    "http://localhost:{port}/page",
    "http://100.64.0.1/page",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/",
    "http://0.0.0.0:{port}/page",
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("template", REFUSED_URLS)
def test_it_refuses_every_private_spelling_without_connecting(server, transport, template):
    before = len(server.hits.paths)
    error = fetch_error(template.format(port=server.port), transport=transport, allowed_networks=[])
    assert error.error_class is ErrorClass.BLOCKED
    assert "refused" in error.detail and "SALVAGE_ALLOWED_NETWORKS" in error.detail
    assert len(server.hits.paths) == before  # nothing reached the server


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "template",
    [
        "http://127.1:{port}/page",
        "http://2130706433:{port}/page",
        "http://0x7f.0.0.1:{port}/page",
        "http://017700000001:{port}/page",
        "http://localhost:{port}/page",
    ],
)
def test_allow_listed_spellings_are_fetched(server, transport, template):
    page = fetch(template.format(port=server.port), transport=transport)
    assert page.status == 200


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_it_connects_to_the_address_it_checked(server2, transport, monkeypatch):
    """DNS rebinding: the first answer is checked and allowed, every later answer points
    elsewhere. The fetch must use the checked answer and never ask the resolver again; the
    Host header keeps the name."""
    real = socket.getaddrinfo
    calls = []

    def rebinding(host, port, *args, **kwargs):
        if host == "rebind.test":
            calls.append(host)
            ip = "127.0.0.2" if len(calls) == 1 else "127.0.0.1"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://rebind.test:{server2.port}/echo"
    page = fetch(url, transport=transport, allowed_networks=["127.0.0.2/32"])
    assert page.status == 200
    assert calls == ["rebind.test"]  # resolved once, by the guard
    assert f"rebind.test:{server2.port}" in page.body.decode()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rebinding_answer_is_refused(transport, monkeypatch):
    real = socket.getaddrinfo

    def to_metadata(host, port, *args, **kwargs):
        if host == "evil.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", to_metadata)
    error = fetch_error("http://evil.test/latest/", transport=transport)
    assert error.error_class is ErrorClass.BLOCKED
    assert "169.254.169.254 (link-local)" in error.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{port}/page",
        "http://127.1:{port}/page",
        "http://localhost:{port}/page",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]:{port}/page",
        "file:///etc/passwd",
    ],
)
def test_every_redirect_hop_is_checked_again(server2, transport, target):
    """The first hop (127.0.0.2) is allowed; the redirect target is not."""
    location = target.format(port=server2.port)
    before = list(server2.hits.paths)
    url = f"http://127.0.0.2:{server2.port}/r?to={location}"
    error = fetch_error(url, transport=transport, allowed_networks=["127.0.0.2/32"])
    assert error.error_class is ErrorClass.BLOCKED
    assert "redirect hop 1" in error.detail
    assert server2.hits.paths == [*before, "/r"]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_an_allow_list_port_admits_that_port_and_no_other(server, transport, name):
    """Allowed on the server's port; the same host on another port (a database, Redis) is
    refused before any connection, by name and by literal."""
    allowed = [f"127.0.0.1:{server.port}"]
    page = fetch(f"http://{name}:{server.port}/page", transport=transport, allowed_networks=allowed)
    assert page.status == 200
    with socket.socket() as other:  # a listening port that must never be reached
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        other.setblocking(False)
        other_port = other.getsockname()[1]
        url = f"http://{name}:{other_port}/"
        error = fetch_error(url, transport=transport, allowed_networks=allowed)
        assert error.error_class is ErrorClass.BLOCKED
        assert f"port {other_port} not allowed" in error.detail
        with pytest.raises(BlockingIOError):
            other.accept()  # nobody connected


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_allow_list_port_is_checked_on_every_hop(server, transport):
    """The first hop is on the allowed port; a redirect to another port of the same host is
    refused, and to the default port too (no port written means 80)."""
    allowed = [f"127.0.0.1:{server.port}"]
    for target in (f"http://127.0.0.1:{server.port + 1}/page", "http://127.0.0.1/page"):
        url = f"{server.base_url}/r?to={target}"
        error = fetch_error(url, transport=transport, allowed_networks=allowed)
        assert error.error_class is ErrorClass.BLOCKED
        assert "redirect hop 1" in error.detail and "not allowed" in error.detail


def raw_redirect_server(location: bytes) -> socket.socket:
    """A server that answers every request with a 302 carrying `location` byte for byte
    (aiohttp's own responses would quote a bad Location before it reached us)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )

    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "location",
    [
        b"http://0177.0.0.1:9/page",  # httpx refuses this numeric spelling
        b"http://127.0.0.1\t:9/page",  # a tab in the host
        b"http://10.0.0.1\t/",
        b"http:\\\\127.0.0.1\\page",  # backslashes: raised InvalidURL out of the fetcher
        b"http://[::1/",
        b"http://exa mple.com/",  # a space: was a DNS failure, filed `network`
        b"http://%31%32%37.0.0.1/",  # percent-escapes in the host
    ],
)
def test_every_refused_redirect_target_is_blocked_url(transport, location):
    listener = raw_redirect_server(location)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        error = fetch_error(url, transport=transport)
    finally:
        listener.close()
    assert error.error_class is ErrorClass.BLOCKED, error.detail
    assert "redirect" in error.detail or "in the host" in error.detail


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://exa mple.com/", "' ' in the host"),
        ("http://a\\b.example/", "in the host"),
        ("ftp://example.com/file", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("gopher://127.0.0.1:70/", "scheme 'gopher'"),
        ("http://example.com:99999/", "invalid URL"),
        ("http:///nohost", "no host"),
        ("http://xn--/", "Malformed A-label"),  # escaped the fetcher as idna's error
        ("http://user:pass@127.0.0.1/", "credentials"),
        ("not a url", "scheme"),
    ],
)
def test_unusable_urls_are_blocked_with_a_reason(url, message):
    error = fetch_error(url)
    assert error.error_class is ErrorClass.BLOCKED
    assert message in error.detail


def test_a_dns_failure_is_a_network_error():
    error = fetch_error("http://no-such-host.invalid/")
    assert error.error_class is ErrorClass.NETWORK
    assert "DNS" in error.detail


# --- limits -----------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_streamed_body_over_the_cap_is_too_large(server, transport):
    error = fetch_error(f"{server.base_url}/big", transport=transport, max_bytes=100_000)
    assert error.error_class is ErrorClass.TOO_LARGE


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_declared_length_over_the_cap_is_too_large(server, transport):
    error = fetch_error(f"{server.base_url}/declared-big", transport=transport, max_bytes=50_000)
    assert error.error_class is ErrorClass.TOO_LARGE
    assert "Content-Length" in error.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_decompressed_bytes_count_against_the_cap(server, transport):
    # ~5 KB on the wire, 5 MB decoded: the cap applies to what we would hold in memory.
    error = fetch_error(f"{server.base_url}/bomb", transport=transport, max_bytes=1_000_000)
    assert error.error_class is ErrorClass.TOO_LARGE


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_undecodable_content_encoding_is_bad_encoding(server, transport):
    error = fetch_error(f"{server.base_url}/bad-gzip", transport=transport)
    assert error.error_class is ErrorClass.BAD_ENCODING
    assert error.detail.startswith("content decoding: ")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_trickling_body_hits_the_total_deadline(server, transport):
    # Each chunk arrives well inside the read timeout; only the total deadline can stop it.
    started = time.monotonic()
    error = fetch_error(
        f"{server.base_url}/trickle", transport=transport, read_timeout=2.0, deadline=0.5
    )
    assert error.error_class is ErrorClass.NETWORK
    assert "deadline" in error.detail
    assert time.monotonic() - started < 3.0  # the 4 s body was not waited for


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_read_timeout_is_a_network_error_labelled_timeout(server, transport):
    error = fetch_error(
        f"{server.base_url}/stall", transport=transport, read_timeout=0.3, deadline=10.0
    )
    assert error.error_class is ErrorClass.NETWORK
    assert error.detail.startswith("timeout: ") and "total deadline" not in error.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_refused_connection_is_a_network_error_not_a_timeout(transport):
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    error = fetch_error(f"http://127.0.0.1:{port}/", transport=transport)
    assert error.error_class is ErrorClass.NETWORK
    assert not error.detail.startswith("timeout")
    assert "refused" in error.detail.lower() or "connect" in error.detail.lower()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_redirect_loop_is_refused(server, transport):
    error = fetch_error(f"{server.base_url}/loop", transport=transport)
    assert error.error_class is ErrorClass.REDIRECTS
    assert "loop" in error.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_redirects_are_limited(server, transport):
    assert fetch(f"{server.base_url}/chain/2", transport=transport, max_redirects=3).status == 200
    error = fetch_error(f"{server.base_url}/chain/5", transport=transport, max_redirects=3)
    assert error.error_class is ErrorClass.REDIRECTS
    assert "more than 3 redirects" in error.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cookies_live_for_one_task_only(server, transport):
    import json

    async def go():
        fetcher = Fetcher(transport=transport)
        try:
            first = await fetcher.fetch(f"{server.base_url}/set-cookie")
            second = await fetcher.fetch(f"{server.base_url}/echo")
            return json.loads(first.body), json.loads(second.body), first.hops
        finally:
            await fetcher.aclose()

    first, second, hops = asyncio.run(go())
    assert first["cookie"] == "session=s3cret-value"  # kept across the task's redirect
    assert len(hops) == 2
    assert second["cookie"] == ""  # a new task starts with an empty jar


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "path",
    ["/page", "/page?x=1&y=", "/a b", "/caf\u00e9?q=\u00fc&x=|", "/x/../page", "/./page#frag"],
)
def test_the_page_url_is_written_as_httpx_writes_it(server, transport, path):
    """Page.url (stored, and the base for links) does not depend on the transport."""
    import httpx

    for url in (f"{server.base_url}{path}", f"HTTP://LOCALHOST:{server.port}{path}"):
        assert fetch(url, transport=transport).url == str(httpx.URL(url))


def test_it_sends_the_configured_user_agent(server, settings):
    import json

    page = fetch(f"{server.base_url}/echo")
    assert json.loads(page.body)["ua"] == settings.SALVAGE_USER_AGENT
    page = fetch(f"{server.base_url}/echo", user_agent="TestBot/1")
    assert json.loads(page.body)["ua"] == "TestBot/1"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_per_host_concurrency_is_bounded(server, transport):
    hits = server.hits
    hits.max_in_flight = 0

    async def go():
        fetcher = Fetcher(transport=transport, per_host=2, concurrency=16)
        try:
            await asyncio.gather(*(fetcher.fetch(f"{server.base_url}/slow") for _ in range(8)))
        finally:
            await fetcher.aclose()

    asyncio.run(go())
    assert hits.max_in_flight == 2


def test_min_delay_spaces_requests_to_a_host(server):
    hits = server.hits
    hits.starts.clear()

    async def go():
        fetcher = Fetcher(per_host=4, min_delay=0.1)
        try:
            await asyncio.gather(*(fetcher.fetch(f"{server.base_url}/slow") for _ in range(4)))
        finally:
            await fetcher.aclose()

    asyncio.run(go())
    starts = sorted(hits.starts)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # Measured where it matters, at the server; scheduling jitter on a loaded box is allowed
    # for. Without spacing all four arrive within a few milliseconds.
    assert len(starts) == 4 and min(gaps) >= 0.05
    assert starts[-1] - starts[0] >= 0.25


def test_a_429_slows_the_host_and_successes_recover():
    gate = HostGate(per_host=4, min_delay=0.0, max_delay=1.0)
    assert gate.interval == 0
    gate.slow_down()
    assert gate.interval == HostGate.STEP
    for _ in range(5):
        gate.slow_down()
    assert gate.interval == 1.0  # capped
    for _ in range(10):
        gate.recover()
    assert gate.interval == 0  # back to the configured minimum


def test_the_guard_reads_the_allow_list_from_settings(settings):
    settings.SALVAGE_ALLOWED_NETWORKS = ["192.168.0.0/16"]
    guard = AddressGuard.from_settings()
    assert guard.check_literal("192.168.1.1", 80) == ipaddress.IPv4Address("192.168.1.1")
    with pytest.raises(FetchError, match="loopback"):
        guard.check_literal("127.0.0.1", 80)


def test_a_host_gate_counts_its_users_through_waits_and_cancellations():
    async def go():
        gate = HostGate(per_host=1, min_delay=0.0, max_delay=1.0)
        async with gate.slot():
            waiter = asyncio.ensure_future(gate.__aenter__())
            await asyncio.sleep(0)
            assert gate.users == 2 and not gate.idle
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            assert gate.users == 1
        assert gate.users == 0 and gate.idle
        gate.min_delay = gate.interval = 5.0  # spacing: the second turn sleeps
        async with gate.slot():
            pass
        sleeper = asyncio.ensure_future(gate.__aenter__())
        await asyncio.sleep(0.01)
        sleeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeper
        assert gate.users == 0 and not gate.semaphore.locked()

    asyncio.run(go())


def test_a_refused_literal_is_refused_at_every_fetch():
    async def go():
        fetcher = Fetcher(allowed_networks=[])
        errors = []
        for _ in range(2):
            with pytest.raises(FetchError) as info:
                await fetcher.fetch("http://127.0.0.1:9/")
            errors.append(info.value.error_class)
        await fetcher.aclose()
        return errors

    assert asyncio.run(go()) == [ErrorClass.BLOCKED, ErrorClass.BLOCKED]


def test_idle_host_gates_are_forgotten_busy_ones_kept(monkeypatch):
    async def go():
        fetcher = Fetcher()
        monkeypatch.setattr(Fetcher, "MAX_GATES", 3)
        busy = fetcher.gate("busy.test")
        slow = fetcher.gate("slow.test")
        slow.slow_down()
        fetcher.gate("idle.test")
        async with busy.slot():
            fetcher.gate("new.test")
            return set(fetcher._gates)

    assert asyncio.run(go()) == {"busy.test", "slow.test", "new.test"}


# --- TLS: connect to the checked IP, verify the certificate against the name ---------------


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """An HTTPS server on 127.0.0.1 whose certificate names only `shop.test`; it records the
    SNI each handshake asked for."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    workdir = tmp_path_factory.mktemp("tls")
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=shop.test",
         "-addext", "subjectAltName=DNS:shop.test"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    server_names: list[str | None] = []
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.sni_callback = lambda sock, name, ctx: server_names.append(name)

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"host": request.headers.get("Host", "")})

    app = web.Application()
    app.router.add_get("/echo", echo)
    loop_runner = web.AppRunner(app, access_log=None)
    served = _start_tls(loop_runner, server_ctx)
    served.server_names = server_names
    served.client_ctx = ssl.create_default_context(cafile=str(cert))
    yield served
    served.stop()


def _start_tls(runner: web.AppRunner, ctx):
    import threading

    from recovery.sandbox.runner import Served

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        loop.run_until_complete(site.start())
        box["port"] = site._server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    return Served(f"https://127.0.0.1:{box['port']}", box["port"], loop, runner, thread)


def _resolve_shop_test(monkeypatch) -> list[str]:
    real = socket.getaddrinfo
    asked = []

    def fake(host, port, *args, **kwargs):
        if host in ("shop.test", "other.test"):
            asked.append(host)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return asked


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tls_uses_the_name_for_sni_and_the_certificate(tls_server, transport, monkeypatch):
    import json

    asked = _resolve_shop_test(monkeypatch)
    tls_server.server_names.clear()
    page = fetch(
        f"https://shop.test:{tls_server.port}/echo",
        transport=transport,
        verify=tls_server.client_ctx,
    )
    assert page.status == 200
    assert json.loads(page.body) == {"host": f"shop.test:{tls_server.port}"}
    assert tls_server.server_names == ["shop.test"]  # SNI: the name, not the checked IP
    assert asked == ["shop.test"]  # resolved once, by the guard


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("host", ["other.test", "127.0.0.1"])
def test_tls_refuses_a_certificate_for_another_name(tls_server, transport, host, monkeypatch):
    _resolve_shop_test(monkeypatch)
    error = fetch_error(
        f"https://{host}:{tls_server.port}/echo",
        transport=transport,
        verify=tls_server.client_ctx,
    )
    # Not transient (another try meets the same certificate): refused, for a human.
    assert error.error_class is ErrorClass.BLOCKED
    assert f"TLS certificate of {host!r} not accepted: " in error.detail
    assert "mismatch" in error.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_tls_with_the_default_trust_refuses_an_unknown_issuer(tls_server, transport, monkeypatch):
    """verify=True (every spec): certifi's bundle, read at the first handshake, and the
    sandbox's self-signed certificate is not in it."""
    _resolve_shop_test(monkeypatch)
    error = fetch_error(f"https://shop.test:{tls_server.port}/echo", transport=transport)
    assert error.error_class is ErrorClass.BLOCKED
    assert "TLS certificate of 'shop.test' not accepted: " in error.detail


def test_the_default_trust_is_httpxs_read_on_first_use():
    import ssl

    import certifi
    import httpx

    from recovery.fetch.clients import _client_ssl_context

    ours = _client_ssl_context(True)
    theirs = httpx.create_ssl_context(verify=True, trust_env=False)
    for name in ("verify_mode", "check_hostname", "options", "verify_flags", "protocol",
                 "minimum_version", "maximum_version", "security_level"):  # fmt: skip
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.get_ciphers() == theirs.get_ciphers()
    assert ours._cafile == certifi.where()  # not read yet
    bio = ssl.MemoryBIO()
    ours.wrap_bio(bio, ssl.MemoryBIO(), server_hostname="shop.test")
    assert ours._cafile is None
    assert ours.cert_store_stats() == theirs.cert_store_stats()


# --- decoding (pure) --------------------------------------------------------------------------


def make_page(body: bytes, content_type: str = "text/html"):
    import httpx

    from recovery.fetch.responses import Page

    return Page(
        url="http://x/",
        status=200,
        headers=httpx.Headers({"content-type": content_type}),
        body=body,
    )


def test_the_declared_charset_is_used():
    body = "£5".encode("latin-1")
    text, encoding, lossy = make_page(body, "text/html; charset=ISO-8859-1").text()
    assert (text, encoding, lossy) == ("£5", "iso8859-1", False)


def test_a_meta_charset_is_used_when_the_header_has_none():
    body = '<meta charset="windows-1252"><p>€5</p>'.encode("cp1252")
    text, encoding, lossy = make_page(body).text()
    assert "€5" in text and encoding == "cp1252" and not lossy


def test_bytes_invalid_in_the_declared_charset_are_bad_encoding():
    with pytest.raises(FetchError) as info:
        make_page(b"<h1>\xff\xfe ok</h1>", "text/html; charset=utf-8").text()
    assert info.value.error_class is ErrorClass.BAD_ENCODING
    assert "byte 4" in info.value.detail


def test_undeclared_non_utf8_falls_back_to_windows_1252_flagged_lossy():
    text, encoding, lossy = make_page("café".encode("cp1252")).text()
    assert (text, encoding, lossy) == ("café", "cp1252", True)


@pytest.mark.parametrize("content_type", ["image/png", "application/pdf", "application/zip"])
def test_binary_content_is_bad_encoding(content_type):
    with pytest.raises(FetchError) as info:
        make_page(b"\x89PNG\r\n", content_type).text()
    assert info.value.error_class is ErrorClass.BAD_ENCODING


def test_an_unknown_charset_name_falls_back_to_utf8():
    text, encoding, _ = make_page(b"ok", "text/html; charset=x-no-such").text()
    assert (text, encoding) == ("ok", "utf-8")


def test_the_demo_allows_the_sandbox_port_only(settings, tmp_path):
    from recovery.showroom import demo

    settings.DATA_DIR = tmp_path
    guard = AddressGuard.from_settings(
        demo.child_environment(8765)["SALVAGE_ALLOWED_NETWORKS"].split(",")
    )
    assert guard.check_literal("127.0.0.1", 8765) and guard.check_literal("::1", 8765)
    for port in (5432, 6379, 8000):  # PostgreSQL, Redis, the dashboard itself
        with pytest.raises(FetchError, match=f"port {port} not allowed"):
            guard.check_literal("127.0.0.1", port)
    with pytest.raises(FetchError, match="loopback"):
        guard.check_literal("127.0.0.2", 8765)
