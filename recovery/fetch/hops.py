"""The URL of each hop a fetch requests: the first, and every redirect's target.

In: a URL (or a Location header and the URL it answered). Out: the URL's parts once it is
known to be one that a transport may send (http or https, a host, no credentials), the target a
redirect leads to, and the URL as httpx writes it; `BlockedURL` for anything unusable, so a bad
URL is refused as one rather than filed as a network failure. Which addresses the host may
reach is the guard's question (recovery.fetch.guard), asked after these checks.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import idna

from recovery.fetch.errors import BlockedURL

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

# ASCII characters a host name may hold (IDN letters are not ASCII and pass); an IPv6
# literal adds ':' and its zone's '%'.
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def check_hop(url: str, hops: list[str]) -> tuple[Any, str, str, int | None]:
    """Record the hop and refuse what no transport may send: a bad scheme or host,
    credentials. Returns (urlsplit parts, " (redirect hop N)", host name, port);
    `Fetcher._literal` checks an IP literal's address."""
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


# A URL httpx would write back unchanged (lower-case scheme and host, no character to quote);
# with no default port and no dot segment (checked apart), Page.url can skip httpx's parse.
_PLAIN_URL = re.compile(
    r"https?://[a-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]*)?(?:\?[A-Za-z0-9._~=&-]*)?\Z"
)
_DOT_SEGMENT = re.compile(r"/\.\.?(?:[/?]|\Z)")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def httpx_spelling(url: str, scheme: str, port: int | None) -> str:
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
