"""The clients the fetch path sends through: an aiohttp session, or an httpx client.

In: the allow-list, the pool size, the connect and read timeouts, the User-Agent and the TLS
trust. Out: `make_session()`, the aiohttp session `Fetcher` drives itself (transport "aiohttp",
the default), or `make_client()`, the httpx client of the two httpx transports. Both resolve
through the guard (recovery.fetch.guard), ignore environment proxies (one would connect on our
behalf to an address we never checked), keep no cookies (`Fetcher` keeps them per task) and
check certificates against the URL's host name although they connect to an IP.

Transport choice (bench/http_transport.py: the sandbox shop's 5 KB product pages from a separate
process on 127.0.0.1, 16 in flight, every guard on, alternating rounds on a shared 2-core box;
noisy, the figures in bench/README.md): `Fetcher` driving an aiohttp session itself ("aiohttp",
the default) spends about 0.4x the client CPU per page of httpx over the httpx-aiohttp transport
("httpx-aiohttp", the default before), which was itself x3.7 the pages/s of httpx's own transport
("httpcore"). All three keep every outbound safety property of recovery.fetch.guard
(tests/unit/test_http_safety.py runs against each).
"""

from __future__ import annotations

import http.cookiejar
import os
import ssl
import sys
from collections.abc import Iterable
from typing import Any

import aiohttp
import httpx

from recovery.fetch.guard import (
    AddressGuard,
    GuardedResolver,
    GuardedTransport,
    guarded_backend_class,
)

# "aiohttp": Fetcher drives an aiohttp session itself (the default). The two httpx transports
# stay selectable (tests run the safety suite on all three; bench/http_transport.py compares).
TRANSPORTS = ("aiohttp", "httpx-aiohttp", "httpcore")
HTTPX_TRANSPORTS = ("httpx-aiohttp", "httpcore")


class _LazyTrustContext(ssl.SSLContext):
    """What httpx.create_ssl_context(verify=True) builds (`ssl.create_default_context` with
    certifi's CA bundle: certificate and host name checked), except that the bundle is read at
    the first TLS handshake rather than when a session is made: reading it costs ~45 ms of CPU
    per process, which a crawl of http pages never needs. Every handshake goes through
    wrap_bio (asyncio) or wrap_socket, and both load the bundle before anything else."""

    _cafile: str | None = None

    def _load_trust(self) -> None:
        if self._cafile is not None:
            cafile, self._cafile = self._cafile, None
            self.load_verify_locations(cafile=cafile)

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load_trust()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load_trust()
        return super().wrap_socket(*args, **kwargs)

    def get_ca_certs(self, binary_form: bool = False) -> list:
        self._load_trust()
        return super().get_ca_certs(binary_form)

    def cert_store_stats(self) -> dict[str, int]:
        self._load_trust()
        return super().cert_store_stats()


def _client_ssl_context(verify: bool | ssl.SSLContext = True) -> ssl.SSLContext:
    """The client TLS context of both factories: certifi's CA bundle (as httpx has it, so no
    environment variable widens the trust), read on first use; `verify` may instead be a
    context (tests pass one trusting their own CA) or False (make_client only; never in a spec)."""
    if verify is not True:
        return httpx.create_ssl_context(verify=verify, trust_env=False)
    import certifi

    context = _LazyTrustContext(ssl.PROTOCOL_TLS_CLIENT)
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = True
    context._cafile = certifi.where()
    # As ssl.create_default_context does (OpenSSL's key log, for debugging a handshake).
    keylog = os.environ.get("SSLKEYLOGFILE")
    if keylog and not sys.flags.ignore_environment:
        context.keylog_filename = keylog
    return context


class _RefuseAll(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie, request) -> bool:
        return False

    def return_ok(self, cookie, request) -> bool:
        return False


def make_client(
    *,
    transport: str = "httpx-aiohttp",
    allowed_networks: Iterable[str] | None = None,
    max_connections: int = 100,
    connect_timeout: float = 5.0,
    read_timeout: float = 15.0,
    user_agent: str | None = None,
    headers: dict[str, str] | None = None,
    verify: bool | ssl.SSLContext = True,
) -> httpx.AsyncClient:
    """The one httpx.AsyncClient factory: pooled, guarded, no env proxies, no shared cookies.

    Must be called inside the event loop that will use it (aiohttp binds to it). Redirects are
    not followed here; `Fetcher.fetch` follows them hop by hop through the guard.
    """
    from django.conf import settings

    if transport not in HTTPX_TRANSPORTS:
        raise ValueError(f"transport {transport!r} is not one of {', '.join(HTTPX_TRANSPORTS)}")
    guard = AddressGuard.from_settings(allowed_networks)
    # Certificates are checked against the URL's host name, although we connect to an IP.
    ssl_context = _client_ssl_context(verify)
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=None)
    inner: httpx.AsyncBaseTransport
    if transport == "httpx-aiohttp":
        from httpx_aiohttp import AiohttpTransport

        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(guard),
            limit=max_connections,
            ssl=ssl_context,
            keepalive_timeout=limits.keepalive_expiry,
        )
        session = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
        )
        inner = AiohttpTransport(client=session, limits=limits, verify=ssl_context, trust_env=False)
    else:
        import httpcore

        inner = httpx.AsyncHTTPTransport(limits=limits, verify=ssl_context, trust_env=False)
        # httpx has no public hook for the network backend; replace its pool with one that
        # resolves through the guard (same options as httpx's own construction).
        inner._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=guarded_backend_class()(guard),
        )
    default_headers = {"User-Agent": user_agent or settings.SALVAGE_USER_AGENT}
    default_headers.update(headers or {})
    return httpx.AsyncClient(
        transport=GuardedTransport(inner, guard),
        timeout=httpx.Timeout(connect=connect_timeout, read=read_timeout, write=10.0, pool=None),
        headers=default_headers,
        # A jar that stores nothing: cookies are kept per task by Fetcher, never shared.
        cookies=http.cookiejar.CookieJar(policy=_RefuseAll()),
        follow_redirects=False,
        trust_env=False,
    )


def make_session(
    *,
    allowed_networks: Iterable[str] | None = None,
    max_connections: int = 100,
    connect_timeout: float = 5.0,
    read_timeout: float = 15.0,
    user_agent: str | None = None,
    verify: bool | ssl.SSLContext = True,
) -> aiohttp.ClientSession:
    """The aiohttp session behind `Fetcher` (transport "aiohttp"): the same guard as
    make_client's, without httpx's layers on top.

    Must be called inside the event loop that will use it. The resolver is the guard (aiohttp
    connects to exactly the addresses it returns); `Fetcher` checks IP literals, schemes,
    redirects, the size cap and the deadline itself.
    """
    from django.conf import settings

    guard = AddressGuard.from_settings(allowed_networks)
    # Certificates are checked against the URL's host name (aiohttp's server_hostname), although
    # we connect to an IP. The same context make_client builds.
    ssl_context = _client_ssl_context(verify)
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(guard),
        limit=max_connections,
        ssl=ssl_context,
        keepalive_timeout=5.0,  # httpx's default keep-alive expiry, as make_client's pools
    )
    return aiohttp.ClientSession(
        connector=connector,
        # Stores nothing: cookies are kept per task by Fetcher (TaskCookies), never shared.
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,  # no environment proxies: one would connect where we never checked
        auto_decompress=True,  # decoded bytes are what Fetcher counts against the cap
        timeout=aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=connect_timeout, sock_read=read_timeout
        ),
        headers={"User-Agent": user_agent or settings.SALVAGE_USER_AGENT},
        raise_for_status=False,
    )
