"""The guarded fetch that the direct provider uses, its aiohttp session and httpx client factories.

Outbound safety (DESIGN.md section 4). A manifest can name any URL, so every connection goes
through `AddressGuard`:

- The host is normalised first: every numeric spelling that the C resolver accepts
  (`127.1`, `2130706433`, `0x7f.0.0.1`, `017700000001`, `[::1]`, `::ffff:127.0.0.1`) is read
  as the address it denotes, so a refusal never depends on how the address was written.
- A name is resolved here (getaddrinfo), each address is checked, and only checked addresses
  are handed to the socket layer: we connect to the IP we checked, never to a name that a second
  lookup could answer differently (DNS rebinding). The URL keeps its host, so the Host header,
  TLS SNI and certificate verification all use the real name.
  * With aiohttp (the default "aiohttp" transport, which `Fetcher` drives directly, and the
    httpx-aiohttp one) the guard is aiohttp's *resolver*: aiohttp connects to exactly the
    addresses the resolver returns. aiohttp skips the resolver for IP literals (and for
    all-digit spellings such as `127.1`), so `Fetcher` (directly) or `GuardedTransport` (under
    httpx) checks numeric hosts itself before every request and sends an odd spelling to its
    canonical literal.
  * With httpx's own transport the guard is httpcore's *network backend*: `connect_tcp(host)`
    resolves, checks and connects to the IP; httpcore still passes the URL's host as SNI.
- Loopback, private, link-local, shared (CGNAT 100.64/10), unspecified, multicast, reserved and
  other non-global addresses are refused unless inside SALVAGE_ALLOWED_NETWORKS (an entry may
  name one port: `127.0.0.1:8765`, and is then checked against every hop's port). IPv4-mapped
  IPv6 addresses are judged as the IPv4 address they carry.
- Redirects are followed by hand (`Fetcher.fetch`), so each hop goes through the same checks.
- Environment proxies are ignored (trust_env=False): a proxy would connect on our behalf to an
  address we never checked.

Each refusal is `BlockedURL` (ErrorClass.BLOCKED) with a message naming the host, the address
and the reason.

Transport choice (bench/http_transport.py: the sandbox shop's 5 KB product pages from a separate
process on 127.0.0.1, 16 in flight, every guard on, alternating rounds on a shared 2-core box;
noisy, the figures in bench/README.md): `Fetcher` driving an aiohttp session itself ("aiohttp",
the default) spends about 0.4x the client CPU per page of httpx over the httpx-aiohttp transport
("httpx-aiohttp", the default before), which was itself x3.7 the pages/s of httpx's own transport
("httpcore"). All three keep every safety property above (tests/unit/test_http_safety.py runs
against each); `make_client` builds the httpx client for the two httpx transports.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import http.cookiejar
import ipaddress
import os
import re
import socket
import ssl
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
import httpx
import idna
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.http_exceptions import ContentEncodingError

from recovery.allowlist import AllowedNetwork, parse_networks
from recovery.providers.base import ErrorClass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

CGNAT = ipaddress.ip_network("100.64.0.0/10")
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# "aiohttp": Fetcher drives an aiohttp session itself (the default). The two httpx transports
# stay selectable (tests run the safety suite on all three; bench/http_transport.py compares).
TRANSPORTS = ("aiohttp", "httpx-aiohttp", "httpcore")
HTTPX_TRANSPORTS = ("httpx-aiohttp", "httpcore")


class FetchError(Exception):
    """A fetch that produced no usable response; `error_class` says which retry-table row."""

    error_class: ErrorClass = ErrorClass.NETWORK

    def __init__(self, error_class: ErrorClass, detail: str, **context: Any) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
        self.context = context  # e.g. status, headers, hops: for the artefact


class BlockedURL(FetchError):
    """Refused by outbound safety: bad scheme, unusable URL, or a forbidden address."""

    def __init__(self, detail: str, **context: Any) -> None:
        super().__init__(ErrorClass.BLOCKED, detail, **context)


# --- addresses --------------------------------------------------------------------------------


def _inet_aton_part(part: str) -> int | None:
    # The C library's inet_aton reads each part as hex (0x..), octal (leading 0) or decimal.
    if not part:
        return None
    try:
        if part[:2].lower() == "0x":
            return int(part[2:], 16) if part[2:] else 0
        if len(part) > 1 and part[0] == "0":
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def numeric_host(host: str) -> IPAddress | None:
    """The address a numeric host denotes, in any spelling getaddrinfo would accept; else None.

    IPv4 follows inet_aton: 1 to 4 parts, each decimal, octal or hex, the last part filling
    the remaining bytes (`127.1` = 127.0.0.1, `2130706433` = 127.0.0.1). IPv6 may be bracketed
    and carry a zone (`fe80::1%eth0`).
    """
    h = host.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h.split("%", 1)[0])
        except ValueError:
            return None
    h = h.rstrip(".")
    parts = h.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_inet_aton_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(parts)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (5 - len(parts)) + last
    return ipaddress.IPv4Address(number)


def refusal_reason(
    address: IPAddress, allowed: Sequence[AllowedNetwork], port: int | None = None
) -> str | None:
    """Why an address (and port) may not be contacted, or None when it may.

    An allow-list entry with a port admits only that port; `port=None` (not known) never
    matches such an entry."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv6 address that carries an IPv4 one is judged as that IPv4 address: mapped
        # (::ffff:a.b.c.d) and 6to4 (2002:AABB:CCDD::, routed to a.b.c.d by a relay).
        # NAT64 (64:ff9b::/96) and IPv4-compatible (::a.b.c.d) fall in ::/8, reserved.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            address = embedded
    if any(entry.admits(address, port) for entry in allowed):
        return None
    checks = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address.version == 4 and address in CGNAT, "shared address space (CGNAT)"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "not globally routable"),
    )
    for hit, reason in checks:
        if hit:
            ports = sorted(
                {e.port for e in allowed if e.port is not None and e.admits(address, e.port)}
            )
            if ports:
                # The network is allowed, on other ports: say so, it is the likely mistake.
                listed = ", ".join(map(str, ports))
                return f"{reason} (port {port} not allowed; allowed port(s): {listed})"
            return reason
    return None


def default_port(scheme: str, port: int | None) -> int | None:
    if port is not None:
        return port
    return {"http": 80, "https": 443}.get(scheme.lower())


@dataclass(frozen=True)
class AddressGuard:
    """Resolves hosts and refuses the addresses outbound safety forbids."""

    allowed: tuple[AllowedNetwork, ...] = ()

    @classmethod
    def from_settings(cls, allowed_networks: Iterable[str] | None = None) -> AddressGuard:
        if allowed_networks is None:
            from django.conf import settings

            allowed_networks = settings.SALVAGE_ALLOWED_NETWORKS
        return cls(parse_networks(allowed_networks))

    def check_literal(self, host: str, port: int | None = None) -> IPAddress | None:
        """For a numeric host: the checked address (BlockedURL if forbidden). None for names.

        Pass the port the connection will use (`default_port`): without it, an allow-list
        entry limited to a port never matches."""
        address = numeric_host(host)
        if address is None:
            return None
        reason = refusal_reason(address, self.allowed, port)
        if reason:
            written = "" if str(address) == host.strip("[]") else f" (written {host!r})"
            raise BlockedURL(
                f"refused {address}{written}: {reason} address not in SALVAGE_ALLOWED_NETWORKS"
            )
        return address

    async def resolve(self, host: str, port: int) -> list[tuple[socket.AddressFamily, str]]:
        """Checked addresses for host, in resolver order. Raises BlockedURL or FetchError."""
        literal = self.check_literal(host, port)
        if literal is not None:
            family = socket.AF_INET6 if literal.version == 6 else socket.AF_INET
            return [(family, str(literal))]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise FetchError(ErrorClass.NETWORK, f"DNS lookup failed for {host!r}: {exc}") from None
        checked: list[tuple[socket.AddressFamily, str]] = []
        refused: list[str] = []
        for family, _type, _proto, _name, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = ipaddress.ip_address(sockaddr[0].split("%", 1)[0])
            reason = refusal_reason(address, self.allowed, port)
            if reason:
                refused.append(f"{address} ({reason})")
            elif (family, str(address)) not in checked:
                checked.append((family, str(address)))
        if not checked:
            detail = ", ".join(refused) or "no IPv4/IPv6 address"
            raise BlockedURL(
                f"refused {host!r}: resolves to {detail}, not in SALVAGE_ALLOWED_NETWORKS"
            )
        # Only the checked addresses are returned; the refused ones are never connected to.
        return checked


class GuardedResolver(AbstractResolver):
    """aiohttp resolver: aiohttp connects to exactly the addresses returned here."""

    def __init__(self, guard: AddressGuard) -> None:
        self.guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        flags = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        return [
            ResolveResult(hostname=host, host=ip, port=port, family=fam, proto=0, flags=flags)
            for fam, ip in await self.guard.resolve(host, port)
        ]

    async def close(self) -> None:
        return None


@functools.cache
def _guarded_backend_class() -> type:
    """GuardedBackend, built on first use: httpcore (~27 ms to import) is loaded only by the
    "httpcore" transport, not by every worker that starts."""
    import httpcore

    class GuardedBackend(httpcore.AsyncNetworkBackend):
        """httpcore network backend: resolve and check here, connect to the checked IP."""

        def __init__(self, guard: AddressGuard) -> None:
            self.guard = guard
            self.inner = httpcore.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> httpcore.AsyncNetworkStream:
            last: Exception | None = None
            for _family, ip in await self.guard.resolve(host, port):
                try:
                    return await self.inner.connect_tcp(
                        ip, port, timeout, local_address, socket_options=socket_options
                    )
                except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                    last = exc
            assert last is not None
            raise last

        async def connect_unix_socket(self, path: str, timeout=None, socket_options=None):
            raise BlockedURL("unix sockets are not allowed")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    return GuardedBackend


def __getattr__(name: str) -> Any:
    if name == "GuardedBackend":
        return _guarded_backend_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class GuardedTransport(httpx.AsyncBaseTransport):
    """Checks every request's scheme and numeric host before the inner transport sees it."""

    def __init__(self, inner: httpx.AsyncBaseTransport, guard: AddressGuard) -> None:
        self.inner = inner
        self.guard = guard

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):
            raise BlockedURL(f"scheme {request.url.scheme!r} is not http or https")
        # IP literals never reach a resolver (aiohttp skips it), so they are checked here.
        port = default_port(request.url.scheme, request.url.port)
        address = self.guard.check_literal(request.url.host, port)
        if address is not None and str(address) != request.url.host:
            # An allowed odd spelling (`127.1`): send to the canonical literal, which every
            # transport parses; the Host header httpx built keeps the original spelling.
            request.url = request.url.copy_with(host=str(address))
        response = await self.inner.handle_async_request(request)
        location = response.headers.get("location")
        if response.status_code in REDIRECT_STATUSES and location is not None:
            # httpx parses the Location itself when the response comes back; a target it
            # cannot read would surface as a protocol error (filed `network`, retried) or an
            # InvalidURL escaping the fetcher. Refuse it here, as the bad URL it is.
            try:
                redirect_target(request.url, location)
            except BlockedURL:
                await response.aclose()
                raise
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def redirect_target(base: httpx.URL, location: str) -> httpx.URL:
    """The URL a Location header leads to, read the way httpx reads it; BlockedURL if unusable."""
    try:
        url = httpx.URL(location)
        if url.scheme and not url.host:
            url = url.copy_with(host=base.host)  # httpx's leniency for `http:/path`
        if url.is_relative_url:
            url = base.join(url)
    except httpx.InvalidURL as exc:
        raise BlockedURL(
            f"redirect target {location!r} refused: not a usable URL ({exc})"
        ) from None
    return url


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
            network_backend=_guarded_backend_class()(guard),
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


# --- per-host politeness ----------------------------------------------------------------------


class HostGate:
    """Concurrency and spacing for one host. A 429 doubles the spacing; a success halves it."""

    STEP = 0.25  # first spacing after a 429 when none is configured

    def __init__(self, per_host: int, min_delay: float, max_delay: float) -> None:
        self.semaphore = asyncio.Semaphore(per_host)
        self.min_delay = min_delay
        self.max_delay = max(max_delay, min_delay)
        self.interval = min_delay
        self.next_at = 0.0
        self.users = 0  # waiting or in flight

    @property
    def idle(self) -> bool:
        return self.users == 0 and self.interval <= self.min_delay

    def slot(self) -> HostGate:
        """`async with gate.slot():` one request's turn: a place among the host's concurrent
        requests, then the host's spacing. (The gate is its own context manager: a generator-
        based one cost ~3 us a fetch.)"""
        return self

    async def __aenter__(self) -> None:
        self.users += 1
        try:
            await self.semaphore.acquire()
        except BaseException:  # cancelled while waiting: not a user any more
            self.users -= 1
            raise
        try:
            if self.interval > 0:
                now = time.monotonic()
                start = max(now, self.next_at)
                self.next_at = start + self.interval
                if start > now:
                    await asyncio.sleep(start - now)  # politeness: a deliberate wait
        except BaseException:
            self.semaphore.release()
            self.users -= 1
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.semaphore.release()
        self.users -= 1

    def slow_down(self) -> None:
        self.interval = min(self.max_delay, max(self.interval * 2, self.STEP, self.min_delay))

    def recover(self) -> None:
        if self.interval > self.min_delay:
            halved = self.interval / 2
            self.interval = self.min_delay if halved < max(self.min_delay, 0.01) else halved


# --- fetching ---------------------------------------------------------------------------------

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_TEXTUAL = re.compile(r"^(text/|application/(xhtml\+xml|xml|json|ld\+json)|[^;]*\+xml)", re.I)


@dataclass
class Page:
    url: str  # final URL after redirects
    status: int
    headers: httpx.Headers
    body: bytes
    hops: list[str] = field(default_factory=list)  # every URL requested, in order
    elapsed_s: float = 0.0

    def text(self) -> tuple[str, str, bool]:
        """(text, encoding, lossy). Raises FetchError(BAD_ENCODING) when unusable.

        A declared charset (header, then <meta>) is binding: bytes invalid in it are
        bad_encoding, never silently replaced (a corrupted title or price must not pass as
        data). With none declared: UTF-8, else windows-1252 (HTML's default), flagged lossy.
        Non-text content types are bad_encoding too.
        """
        content_type = self.headers.get("content-type", "")
        mime = content_type.split(";", 1)[0].strip()
        if mime and not _TEXTUAL.match(mime):
            raise FetchError(ErrorClass.BAD_ENCODING, f"content type {mime!r} is not text")
        declared = _charset(content_type) or _meta_charset(self.body[:2048])
        if declared:
            try:
                return self.body.decode(declared), declared, False
            except UnicodeDecodeError as exc:
                raise FetchError(
                    ErrorClass.BAD_ENCODING,
                    f"body is not valid {declared}: {exc.reason} at byte {exc.start}",
                ) from None
        try:
            return self.body.decode("utf-8"), "utf-8", False
        except UnicodeDecodeError:
            return self.body.decode("cp1252", errors="replace"), "cp1252", True


def _charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return _known_codec(value.strip().strip("\"'"))
    return None


def _meta_charset(head: bytes) -> str | None:
    match = _META_CHARSET.search(head)
    return _known_codec(match.group(1).decode("ascii", "replace")) if match else None


def _known_codec(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


# A URL httpx would write back unchanged (lower-case scheme and host, no character to quote);
# with no default port and no dot segment (checked apart), Page.url can skip httpx's parse.
_PLAIN_URL = re.compile(
    r"https?://[a-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]*)?(?:\?[A-Za-z0-9._~=&-]*)?\Z"
)
_DOT_SEGMENT = re.compile(r"/\.\.?(?:[/?]|\Z)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _httpx_spelling(url: str, scheme: str, port: int | None) -> str:
    """url as httpx writes it (scheme and host lower-cased, default port and dot segments
    dropped, unsafe characters quoted): what Page.url said before the aiohttp path, kept so
    that stored URLs and link bases do not change with the transport."""
    if (
        _PLAIN_URL.match(url)
        and not _DOT_SEGMENT.search(url)
        and port != _DEFAULT_PORTS.get(scheme)
    ):
        return url
    try:
        return str(httpx.URL(url))
    except (httpx.InvalidURL, ValueError):  # IDNAError is a ValueError (UnicodeError)
        return url


# ASCII characters a host name may hold (IDN letters are not ASCII and pass); an IPv6
# literal adds ':' and its zone's '%'.
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_ABCDEFGHIJKLMNOPQRSTUVWXYZ")


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
    ) -> None:
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
        self._client: httpx.AsyncClient | aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gates: dict[str, HostGate] = {}
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
            self._gates = {}
        return self._client

    MAX_GATES = 10_000

    def gate(self, host: str) -> HostGate:
        gate = self._gates.get(host)
        if gate is None:
            if len(self._gates) >= self.MAX_GATES:
                # A crawl over many hosts: forget the idle ones (nothing in flight, no penalty).
                for name, old in list(self._gates.items()):
                    if old.idle:
                        del self._gates[name]
            gate = self._gates[host] = HostGate(self.per_host, self.min_delay, self.max_host_delay)
        return gate

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            if isinstance(client, aiohttp.ClientSession):
                await client.close()
            else:
                await client.aclose()

    async def fetch(
        self, url: str, *, headers: dict[str, str] | None = None, max_bytes: int | None = None
    ) -> Page:
        """`max_bytes` overrides the size cap for this fetch (a sitemap may hold 50 MB)."""
        client = self._ensure_client()
        direct = isinstance(client, aiohttp.ClientSession)
        cookies = TaskCookies()
        hops: list[str] = []
        seen: set[str] = set()
        budget = self.limits.deadline
        started = time.monotonic()
        current = url
        while True:
            parts, where, hostname, port = self._check(current, hops)
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
            seen.add(current)
            gate = self.gate(host)
            async with gate.slot():
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

    def _check(self, url: str, hops: list[str]) -> tuple[Any, str, str, int | None]:
        """Record the hop and refuse what no transport may send: a bad scheme or host,
        credentials. Returns (urlsplit parts, " (redirect hop N)", host name, port);
        `_literal` checks an IP literal's address."""
        hops.append(url)
        where = f" (redirect hop {len(hops) - 1})" if len(hops) > 1 else ""
        try:
            parts = urlsplit(url)
            port = parts.port  # raises ValueError for a bad port
        except ValueError as exc:
            raise BlockedURL(f"invalid URL{where} {url!r}: {exc}", hops=hops) from None
        if parts.scheme.lower() not in ("http", "https"):
            raise BlockedURL(
                f"scheme {parts.scheme or '(none)'!r}{where} is not http or https", hops=hops
            )
        hostname = parts.hostname  # parsed again at every reading: read once
        if not hostname:
            raise BlockedURL(f"invalid URL{where} {url!r}: no host", hops=hops)
        if not _HOST_CHARS.issuperset(hostname):
            allowed = _HOST_CHARS | ({":", "%"} if ":" in hostname else set())
            bad = next((c for c in hostname if c.isascii() and c not in allowed), None)
            if bad is not None:
                # A space, tab, backslash or percent-escape in a host name is no host: refuse
                # it here rather than let a resolver's "not found" file it as a network failure.
                raise BlockedURL(f"invalid URL{where} {url!r}: {bad!r} in the host", hops=hops)
        if parts.username is not None or parts.password is not None:
            raise BlockedURL(f"URL{where} carries credentials (user@host): refused", hops=hops)
        if "xn--" in hostname:
            try:
                idna.decode(hostname)
            except ValueError as exc:  # idna.IDNAError is a UnicodeError, a ValueError
                # A malformed A-label is no host (a resolver would only say "not found").
                raise BlockedURL(f"invalid URL{where} {url!r}: {exc}", hops=hops) from None
        return parts, where, hostname, port

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
        return DirectRequest(url, extra, _httpx_spelling(url, parts.scheme, port))

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
                _check_declared(response.headers, cap, response.status_code)
                chunks: list[bytes] = []
                if response.status_code not in REDIRECT_STATUSES:
                    chunks = await _read_capped(response.aiter_bytes(), cap, response.status_code)
            finally:
                await response.aclose()
        except FetchError:
            raise
        except httpx.DecodingError as exc:
            raise FetchError(ErrorClass.BAD_ENCODING, f"content decoding: {exc}") from None
        except (httpx.TransportError, aiohttp.ClientError, OSError) as exc:
            raise _transport_error(exc, request.url.host) from None
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
                _check_declared(headers, cap, response.status)
                chunks: list[bytes] = []
                if response.status not in REDIRECT_STATUSES:
                    # aiohttp decodes as it reads, in bounded steps.
                    chunks = await _read_capped(response.content.iter_any(), cap, response.status)
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
            if any(isinstance(c, ContentEncodingError) for c in _chain(exc)):
                raise FetchError(ErrorClass.BAD_ENCODING, f"content decoding: {exc}") from None
            raise _transport_error(exc, urlsplit(request.url).hostname) from None
        return Page(url=url, status=response.status, headers=headers, body=b"".join(chunks))


def _check_declared(headers: httpx.Headers, cap: int, status: int) -> None:
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise FetchError(
            ErrorClass.TOO_LARGE, f"Content-Length {declared} is over the {cap}-byte cap",
            status=status,
        )  # fmt: skip


async def _read_capped(chunks: AsyncIterator[bytes], cap: int, status: int) -> list[bytes]:
    """The body's chunks, refused past `cap`. Decoded bytes are counted, so a compressed bomb
    stops at the cap too."""
    read: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > cap:
            raise FetchError(
                ErrorClass.TOO_LARGE, f"response body over the {cap}-byte cap", status=status
            )
        read.append(chunk)
    return read


def _transport_error(exc: BaseException, host: str | None) -> FetchError:
    """A transport's exception as the FetchError the retry table reads."""
    causes = list(_chain(exc))
    cert = [c for c in causes if isinstance(c, ssl.SSLCertVerificationError)]
    if cert:
        # Not transient: another try meets the same certificate. Refuse, for a human.
        reason = getattr(cert[-1], "verify_message", "") or str(cert[-1])
        return BlockedURL(f"TLS certificate of {host!r} not accepted: {reason}")
    # httpx-aiohttp maps every aiohttp connection error to httpx.ConnectTimeout, so the httpx
    # class proves nothing: say "timeout" only for a real one underneath.
    # httpcore is imported only by the httpcore transport: when it is not loaded, none of its
    # exceptions can be in the chain.
    httpcore = sys.modules.get("httpcore")
    timeouts = (TimeoutError, httpcore.TimeoutException) if httpcore else (TimeoutError,)
    timed_out = any(isinstance(c, timeouts) for c in causes)
    label = "timeout: " if timed_out else ""
    return FetchError(ErrorClass.NETWORK, label + _describe(causes))


def _chain(exc: BaseException):
    """exc and its causes, outermost first (bounded: chains can be cyclic)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 10:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _describe(causes: list[BaseException]) -> str:
    """`Type: message` for each distinct, non-empty link of an exception chain, outermost
    first (httpcore's outer links often carry no message)."""
    parts: list[str] = []
    for exc in causes:
        text = str(exc)
        if text and not any(text in part for part in parts):
            parts.append(f"{type(exc).__name__}: {text}")
    return " <- ".join(parts)[:600] or type(causes[0]).__name__
