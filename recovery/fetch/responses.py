"""What comes back from one hop: its body read under the size cap, or the failure it is.

In: a response's headers and body chunks (from either transport), or the exception a transport
raised. Out: the chunks, refused as `TOO_LARGE` past the cap (declared or counted after
decoding, so a compressed bomb stops at the cap too); a transport's exception as the
`FetchError` the retry table reads (a refused certificate as `BlockedURL`); and `Page`, what a
fetch returns, whose `text()` decodes the body by its declared charset or refuses it.
"""

from __future__ import annotations

import codecs
import re
import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx

from recovery.fetch.errors import BlockedURL, FetchError
from recovery.outcomes import ErrorClass

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


def check_declared(headers: httpx.Headers, cap: int, status: int) -> None:
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise FetchError(
            ErrorClass.TOO_LARGE, f"Content-Length {declared} is over the {cap}-byte cap",
            status=status,
        )  # fmt: skip


async def read_capped(chunks: AsyncIterator[bytes], cap: int, status: int) -> list[bytes]:
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


def transport_error(exc: BaseException, host: str | None) -> FetchError:
    """A transport's exception as the FetchError the retry table reads."""
    causes = list(exception_chain(exc))
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


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
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
