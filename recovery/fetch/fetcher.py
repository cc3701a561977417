"""The guarded GET every page fetch goes through: `Fetcher`.

In: a URL, extra headers, and optionally a size cap for this fetch. Out: the final `Page`
(status, headers, body, every hop requested, time on the wire), or a `FetchError` with its
retry-table class. Between the two: each hop's URL checked (recovery.fetch.hops) and its
address checked by the guard (recovery.fetch.guard), redirects followed by hand so every hop
meets the same checks, the host's gate (recovery.fetch.hostgate), per-task cookies, the size
cap and one total deadline for all hops; the response read by recovery.fetch.responses.

The same fetch runs on either client of recovery.fetch.clients: transport "aiohttp" (the
default) sends through the aiohttp session itself (`_build_direct`, `_send_direct`); the two
httpx transports through an httpx client (`_build`, `_send`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import httpx
from aiohttp.http_exceptions import ContentEncodingError

from recovery.fetch.allowlist import IPAddress
from recovery.fetch.clients import TRANSPORTS, make_client, make_session
from recovery.fetch.errors import BlockedURL, FetchError
from recovery.fetch.guard import AddressGuard, default_port
from recovery.fetch.hops import REDIRECT_STATUSES, check_hop, httpx_spelling, redirect_target
from recovery.fetch.hostgate import HostGate
from recovery.fetch.hostseats import MAX_SEATS, SharedSeats
from recovery.fetch.hostslots import SharedTurns
from recovery.fetch.responses import (
    Page,
    check_declared,
    exception_chain,
    read_capped,
    transport_error,
)
from recovery.outcomes import ErrorClass


@dataclass
class FetchLimits:
    max_bytes: int
    deadline: float
    max_redirects: int = 5


class TaskCookies:
    """One task's cookies: redirect hops share them, tasks do not. The jar is made only when a
    response sets a cookie (most pages never do; a jar per task cost ~0.05 ms a page).

    The same httpx.Cookies jar (the standard library's cookie rules) serves every transport;
    the aiohttp path hands it httpx request/response objects only when a cookie is involved."""

    __slots__ = ("jar",)

    def __init__(self) -> None:
        self.jar: httpx.Cookies | None = None

    def add_header(self, request: httpx.Request) -> None:
        if self.jar is not None:
            self.jar.set_cookie_header(request)

    def extract(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            if self.jar is None:
                self.jar = httpx.Cookies()
            self.jar.extract_cookies(response)

    def header_for(self, url: str) -> str | None:
        """The Cookie header for a request to url (aiohttp path), or None."""
        if self.jar is None:
            return None
        request = httpx.Request("GET", url)
        self.jar.set_cookie_header(request)
        return request.headers.get("cookie")

    def extract_from(self, url: str, headers: httpx.Headers) -> None:
        """Keep the cookies a response to url sets (aiohttp path)."""
        if "set-cookie" in headers:
            self.extract(httpx.Response(200, headers=headers, request=httpx.Request("GET", url)))


@dataclass(slots=True)
class DirectRequest:
    """One hop on the aiohttp path: the URL to send (an allowed odd numeric spelling already
    rewritten to its canonical literal) and the headers beyond the session's."""

    url: str
    headers: dict[str, str]
    page_url: str  # Page.url: the URL as the httpx paths wrote it


class Fetcher:
    """GET with the guard, per-host gates, per-task cookies, a size cap and a total deadline.

    The deadline covers the time on the wire for all hops (connect, headers, body), not the
    time queued behind a host's gate: a task waiting its turn is not a slow server.

    transport "aiohttp" (the default) drives an aiohttp session directly (`make_session`);
    "httpx-aiohttp" and "httpcore" send through an httpx client (`make_client`). All three
    keep the same guarantees (tests/unit/test_http_safety.py runs on each).
    """

    def __init__(
        self,
        *,
        transport: str = "aiohttp",
        allowed_networks: Iterable[str] | None = None,
        concurrency: int = 16,
        per_host: int = 8,
        min_delay: float = 0.0,
        max_host_delay: float = 2.0,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        max_bytes: int | None = None,
        deadline: float | None = None,
        max_redirects: int = 5,
        user_agent: str | None = None,
        verify: bool | ssl.SSLContext = True,
        shared: bool | None = None,
        shared_seats: bool = False,
    ) -> None:
        """`shared`: take a spaced host's turns from the budget every worker shares
        (recovery.fetch.hostslots; default SALVAGE_SHARED_POLITENESS). `shared_seats`: and
        bound each host's requests in flight by `per_host` across every worker too
        (recovery.fetch.hostseats; a provider asks for it when the spec sets `per_host`)."""
        from django.conf import settings

        if transport not in TRANSPORTS:
            raise ValueError(f"transport {transport!r} is not one of {', '.join(TRANSPORTS)}")
        self.limits = FetchLimits(
            max_bytes=max_bytes or settings.SALVAGE_MAX_RESPONSE_BYTES,
            deadline=deadline or settings.SALVAGE_REQUEST_DEADLINE,
            max_redirects=max_redirects,
        )
        self.transport = transport
        self.client_options = {
            "allowed_networks": allowed_networks,
            "max_connections": concurrency,
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "user_agent": user_agent,
            "verify": verify,  # tests pass a context trusting their own CA; never off in a spec
        }
        # Fail at construction on a bad allow-list, not on the first fetch.
        self.guard = AddressGuard.from_settings(allowed_networks)
        self.per_host = per_host
        self.min_delay = min_delay
        self.max_host_delay = max_host_delay
        if shared is None:
            shared = settings.SALVAGE_SHARED_POLITENESS
        self.shared = SharedTurns() if shared else None
        # Two statements a request: only when asked, and only for a cap small enough to be
        # a politeness limit (MAX_SEATS).
        share_seats = shared and shared_seats and per_host <= MAX_SEATS
        self.seats = SharedSeats(self.limits.deadline) if share_seats else None
        self._client: httpx.AsyncClient | aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gates: dict[str, HostGate] = {}
        self._gates_loop: asyncio.AbstractEventLoop | None = None
        self._literals: dict[tuple[str, int | None], IPAddress | None] = {}

    def _ensure_client(self) -> httpx.AsyncClient | aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            # A new event loop (a caller using asyncio.run per batch) cannot reuse sockets,
            # semaphores or the aiohttp session of the old one: start afresh.
            if self.transport == "aiohttp":
                self._client = make_session(**self.client_options)
            else:
                self._client = make_client(transport=self.transport, **self.client_options)
            self._loop = loop
        return self._client

    MAX_GATES = 10_000

    def gate(self, host: str) -> HostGate:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a test looking at a gate after its loop ended
            loop = None
        if loop is not None and self._gates_loop is not loop:
            # A gate's semaphore belongs to one event loop. Reset here, not with the client:
            # a gate given its Crawl-delay before this Fetcher's first request (robots.txt
            # read by another worker) must survive that request.
            self._gates = {}
            self._gates_loop = loop
        gate = self._gates.get(host)
        if gate is None:
            if len(self._gates) >= self.MAX_GATES:
                # A crawl over many hosts: forget the idle ones (nothing in flight, no penalty).
                for name, old in list(self._gates.items()):
                    if old.idle:
                        del self._gates[name]
            gate = self._gates[host] = HostGate(
                self.per_host,
                self.min_delay,
                self.max_host_delay,
                host=host,
                shared=self.shared,
                seats=self.seats,
            )
        return gate

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            if isinstance(client, aiohttp.ClientSession):
                await client.close()
            else:
                await client.aclose()

    async def fetch(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        max_bytes: int | None = None,
        may_defer: bool = False,
        always_turn: bool = False,
    ) -> Page:
        """`max_bytes` overrides the size cap for this fetch (a sitemap may hold 50 MB).

        `may_defer`: the first hop raises TurnDeferred, with nothing sent, when its host's
        shared turn is further away than SALVAGE_POLITENESS_WAIT (a page's fetch: the page is
        deferred); every other hop waits for its turn. `always_turn`: take a shared turn even
        before the host has a spacing (robots.txt: HostGate.slot)."""
        client = self._ensure_client()
        direct = isinstance(client, aiohttp.ClientSession)
        cookies = TaskCookies()
        hops: list[str] = []
        seen: set[str] = set()
        budget = self.limits.deadline
        started = time.monotonic()
        current = url
        while True:
            parts, where, hostname, port = check_hop(current, hops)
            address = self._literal(hostname, default_port(parts.scheme, port), where, hops)
            request: DirectRequest | httpx.Request
            if direct:
                request = self._build_direct(parts, hostname, port, address, hops, headers, cookies)
                host = parts.netloc.lower()  # the key robots.py uses for Crawl-delay
            else:
                request = self._build(client, where, hops, headers, cookies)
                host = request.url.netloc.decode("ascii").lower()
            if current in seen:
                raise FetchError(
                    ErrorClass.REDIRECTS, f"redirect loop: {' -> '.join(hops)}", hops=hops
                )
            first = not seen
            seen.add(current)
            gate = self.gate(host)
            async with gate.slot(may_defer=may_defer and first, always=always_turn and first):
                hop_started = time.monotonic()
                try:
                    async with asyncio.timeout(budget):
                        if direct:
                            page = await self._send_direct(client, request, cookies, max_bytes)
                        else:
                            page = await self._send(client, request, cookies, max_bytes)
                except BlockedURL as exc:
                    # A name refused at connect time: say which hop it was.
                    raise BlockedURL(f"{exc.detail}{where}", hops=hops) from None
                except FetchError as exc:
                    exc.context.setdefault("hops", hops)
                    raise
                except TimeoutError:
                    raise FetchError(
                        ErrorClass.NETWORK,
                        f"total deadline of {self.limits.deadline:g}s exceeded at {current}",
                        hops=hops,
                    ) from None
                finally:
                    budget -= time.monotonic() - hop_started
            if page.status == 429:
                gate.slow_down()
            elif page.status < 400:
                gate.recover()
            location = page.headers.get("location")
            if page.status in REDIRECT_STATUSES and location:
                if len(hops) > self.limits.max_redirects:
                    raise FetchError(
                        ErrorClass.REDIRECTS,
                        f"more than {self.limits.max_redirects} redirects: {' -> '.join(hops)}",
                        hops=hops,
                    )
                current = urljoin(page.url, location.strip())
                continue
            page.hops = hops
            page.elapsed_s = time.monotonic() - started
            return page

    MAX_LITERALS = 4096

    def _literal(
        self, hostname: str, port: int | None, where: str, hops: list[str]
    ) -> IPAddress | None:
        """guard.check_literal(hostname, port), remembered for the hosts it let through (the
        guard and the host decide it: a crawl asks the same question for every page). A
        refusal is not remembered; it is raised again each time."""
        key = (hostname, port)
        try:
            return self._literals[key]
        except KeyError:
            pass
        try:
            # Before httpx or yarl parses the host: they reject some numeric spellings as
            # invalid, and the operator should read "loopback", not "invalid URL".
            address = self.guard.check_literal(hostname, port)
        except BlockedURL as exc:
            raise BlockedURL(f"{exc.detail}{where}", hops=hops) from None
        if len(self._literals) >= self.MAX_LITERALS:
            self._literals.clear()
        self._literals[key] = address
        return address

    def _build(
        self,
        client: httpx.AsyncClient,
        where: str,
        hops: list[str],
        headers: dict[str, str] | None,
        cookies: TaskCookies,
    ) -> httpx.Request:
        url = hops[-1]
        try:
            request = client.build_request("GET", url, headers=headers)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
            # ValueError: idna's error for a malformed A-label (`xn--`) escaped httpx.
            raise BlockedURL(f"invalid URL{where} {url!r}: {exc}", hops=hops) from None
        cookies.add_header(request)
        return request

    def _build_direct(
        self,
        parts: Any,
        hostname: str,
        port: int | None,
        address: IPAddress | None,
        hops: list[str],
        headers: dict[str, str] | None,
        cookies: TaskCookies,
    ) -> DirectRequest:
        url = hops[-1]
        extra = dict(headers) if headers else {}
        if address is not None and str(address) != hostname:
            # An allowed odd spelling (`127.1`, which aiohttp would hand to the socket layer
            # as is): send to the canonical literal, Host keeps the spelling the URL has (as
            # httpx does). The IP literal never reaches the resolver, so this is the check.
            literal = f"[{address}]" if address.version == 6 else str(address)
            netloc = literal if port is None else f"{literal}:{port}"
            extra.setdefault("Host", parts.netloc)
            url = parts._replace(netloc=netloc).geturl()
        cookie = cookies.header_for(url)
        if cookie:
            extra["Cookie"] = cookie
        return DirectRequest(url, extra, httpx_spelling(url, parts.scheme, port))

    async def _send(
        self,
        client: httpx.AsyncClient,
        request: httpx.Request,
        cookies: TaskCookies,
        max_bytes: int | None = None,
    ) -> Page:
        cap = max_bytes or self.limits.max_bytes
        try:
            response = await client.send(request, stream=True)
            try:
                cookies.extract(response)
                check_declared(response.headers, cap, response.status_code)
                chunks: list[bytes] = []
                if response.status_code not in REDIRECT_STATUSES:
                    chunks = await read_capped(response.aiter_bytes(), cap, response.status_code)
            finally:
                await response.aclose()
        except FetchError:
            raise
        except httpx.DecodingError as exc:
            raise FetchError(ErrorClass.BAD_ENCODING, f"content decoding: {exc}") from None
        except (httpx.TransportError, aiohttp.ClientError, OSError) as exc:
            raise transport_error(exc, request.url.host) from None
        return Page(
            url=str(request.url),
            status=response.status_code,
            headers=response.headers,
            body=b"".join(chunks),
        )

    async def _send_direct(
        self,
        session: aiohttp.ClientSession,
        request: DirectRequest,
        cookies: TaskCookies,
        max_bytes: int | None = None,
    ) -> Page:
        cap = max_bytes or self.limits.max_bytes
        try:
            response = await session.get(
                request.url, headers=request.headers or None, allow_redirects=False
            )
            complete = False
            try:
                # httpx.Headers over the raw bytes, as the httpx-aiohttp transport built them:
                # callers keep the same case-insensitive, comma-joining header object.
                headers = httpx.Headers(response.raw_headers)
                url = request.page_url
                cookies.extract_from(url, headers)
                check_declared(headers, cap, response.status)
                chunks: list[bytes] = []
                if response.status not in REDIRECT_STATUSES:
                    # aiohttp decodes as it reads, in bounded steps.
                    chunks = await read_capped(response.content.iter_any(), cap, response.status)
                else:
                    location = headers.get("location")
                    if location is not None:
                        # Read the target the way the httpx paths do (GuardedTransport), so an
                        # unusable Location is refused as a bad URL on every transport.
                        try:
                            base = httpx.URL(url)
                        except httpx.InvalidURL:
                            base = None  # the next hop's own checks still apply
                        if base is not None:
                            redirect_target(base, location)
                complete = True
            finally:
                # release() pools the connection only when the body was read to its end (a
                # redirect's unread body closes it); a cap, an error or the deadline closes it
                # outright rather than draining it.
                if complete:
                    response.release()
                else:
                    response.close()
        except FetchError:
            raise
        except aiohttp.InvalidURL as exc:
            raise BlockedURL(f"invalid URL {request.url!r}: {exc}") from None
        except (aiohttp.ClientError, OSError) as exc:
            if any(isinstance(c, ContentEncodingError) for c in exception_chain(exc)):
                raise FetchError(ErrorClass.BAD_ENCODING, f"content decoding: {exc}") from None
            raise transport_error(exc, urlsplit(request.url).hostname) from None
        return Page(url=url, status=response.status, headers=headers, body=b"".join(chunks))
