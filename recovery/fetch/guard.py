"""Outbound safety (DESIGN.md section 4): resolve, check each address, connect to the checked one.

In: a host and the port a connection will use. Out: the addresses that may be contacted (the
refused ones are never handed to a socket), or `BlockedURL` naming the host, the address and the
reason. `AddressGuard` decides; `GuardedResolver` (aiohttp), `GuardedBackend` (httpcore) and
`GuardedTransport` (httpx) plug it into each transport.

A manifest can name any URL, so every connection goes through `AddressGuard`:

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
- Redirects are followed by hand (recovery.fetch.fetcher), so each hop meets the same checks.
- Environment proxies are ignored (trust_env=False): a proxy would connect on our behalf to an
  address we never checked.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from aiohttp.abc import AbstractResolver, ResolveResult

from recovery.fetch.allowlist import AllowedNetwork, IPAddress, parse_networks
from recovery.fetch.errors import BlockedURL, FetchError
from recovery.fetch.hops import REDIRECT_STATUSES, redirect_target
from recovery.outcomes import ErrorClass

CGNAT = ipaddress.ip_network("100.64.0.0/10")

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
def guarded_backend_class() -> type:
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
        return guarded_backend_class()
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
