"""robots.txt, obeyed by default (RFC 9309), for the providers that fetch pages themselves.

Before a task's page is fetched, its origin's `/robots.txt` is read through the same guarded
`Fetcher` as the page (outbound safety, per-host gate, redirects hop by hop), parsed with
`protego` (Scrapy's parser) and kept for ROBOTS_LIFETIME seconds per (run, origin): a run sees
one consistent policy per host, and a long run re-reads it at most hourly (RFC 9309 2.4 asks
for no more than 24 hours). Why protego rather than urllib.robotparser: the standard parser
applies the first matching rule instead of the longest match, so `Disallow: /shop` before
`Allow: /shop/public` refuses /shop/public, and it does not understand `*` or `$` in paths
(tests/unit/test_robots.py shows both cases against both parsers).

What each answer means (RFC 9309 2.3.1):
- 2xx: the rules apply to the product token of SALVAGE_USER_AGENT (`Salvage`), falling back to
  the `*` group. A refused URL ends as `robots_disallowed`: terminal, visible, never fetched.
  `Crawl-delay` raises the host gate's minimum spacing (capped at MAX_CRAWL_DELAY seconds).
- 4xx other than 429, and a redirect chain too long to follow: "unavailable", everything is
  allowed.
- 5xx, 429 and network failures: "unreachable", nothing may be fetched yet. The task is
  retried later as `server_error` / `rate_limited` / `network` (the retry table's rows), and the
  failure is remembered for UNREACHABLE_RETRY seconds so a batch does not re-ask at once.
- An origin refused by outbound safety is left to the page's own fetch, which refuses it as
  `blocked_url`; another local failure (e.g. over the size cap) keeps its own class.

A dataset opts out only with `robots = { obey = false, reason = "..." }` in its spec
(docs/spec-format.md); saving such a spec writes the reason to the audit log.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

from protego import Protego

from recovery.http import Fetcher, FetchError, HostGate
from recovery.providers.base import ErrorClass

ROBOTS_LIFETIME = 3600.0  # seconds a parsed robots.txt is reused within one run
UNREACHABLE_RETRY = 30.0  # seconds an unreachable robots.txt is not asked again
MAX_CRAWL_DELAY = 60.0  # a larger Crawl-delay is honoured as this many seconds
MAX_CACHED = 10_000  # origins kept per provider; the oldest are dropped beyond it


@dataclass(frozen=True, slots=True)
class Verdict:
    """May this URL be fetched? `error_class` is set when robots.txt itself could not be read."""

    allowed: bool
    crawl_delay: float | None = None
    error_class: ErrorClass | None = None
    detail: str = ""


@dataclass(slots=True)
class _Entry:
    expires: float
    parser: Protego | None  # None: allow everything (robots.txt unavailable)
    failure: Verdict | None = None  # set when robots.txt was unreachable
    delay: float | None = None  # the parser's Crawl-delay for our agent, read once


def product_token(user_agent: str) -> str:
    """`Salvage/0.1 (+url)` -> `Salvage`: the name robots.txt groups are matched against."""
    return (user_agent.split("/", 1)[0].split() or ["*"])[0]


def robots_url(url: str) -> str:
    return _robots_url(urlsplit(url))


def _robots_url(parts: SplitResult) -> str:
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), "/robots.txt", "", ""))


def obeys(spec: dict) -> bool:
    """True unless the dataset's spec opts out (with a reason, checked by recovery.specs)."""
    return bool((spec.get("robots") or {}).get("obey", True))


def interpret(status: int, body: bytes) -> tuple[Protego | None, Verdict | None]:
    """(parser, failure) for a robots.txt response, per RFC 9309 2.3.1."""
    if 200 <= status < 300:
        # RFC 9309 2.5: at least 500 KiB must be parsed; the fetcher's size cap is larger.
        return Protego.parse(body.decode("utf-8", "replace")), None
    if status == 429:
        return None, Verdict(False, None, ErrorClass.RATE_LIMITED, "robots.txt: HTTP 429")
    if 500 <= status < 600:
        detail = f"robots.txt unreachable (HTTP {status}): retried later"
        return None, Verdict(False, None, ErrorClass.SERVER, detail)
    return None, None  # 4xx and anything else: unavailable, allow all


def apply_crawl_delay(gate: HostGate, delay: float) -> None:
    """Raise the host gate's floor: requests to the host are at least `delay` apart."""
    delay = min(delay, MAX_CRAWL_DELAY)
    if delay > gate.min_delay:
        gate.min_delay = delay
        gate.max_delay = max(gate.max_delay, delay)
        gate.interval = max(gate.interval, delay)


class RobotsPolicy:
    """One provider instance's robots.txt cache, keyed by (run, origin)."""

    def __init__(self, fetcher: Fetcher, user_agent: str) -> None:
        self.fetcher = fetcher
        self.agent = product_token(user_agent)
        self._entries: dict[tuple[int, str], _Entry] = {}
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def check(self, run_id: int, url: str) -> Verdict:
        try:
            parts = urlsplit(url)
            usable = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        except ValueError:
            usable = False
        if not usable:
            return Verdict(True)  # the page fetch refuses it, with outbound safety's own words
        location = _robots_url(parts)
        entry = self._entries.get((run_id, location))
        if entry is None or entry.expires <= time.monotonic():
            entry = await self._entry(run_id, location)
        if entry.failure is not None:
            return entry.failure
        if entry.parser is None:
            return Verdict(True)
        delay = entry.delay
        if delay is not None and delay > 0:
            apply_crawl_delay(self.fetcher.gate(parts.netloc.lower()), float(delay))
        if entry.parser.can_fetch(url, self.agent):
            return Verdict(True, delay)
        return Verdict(
            False,
            delay,
            ErrorClass.ROBOTS_DISALLOWED,
            f"disallowed by {robots_url(url)} for user agent {self.agent!r}",
        )

    async def pace(self, url: str) -> None:
        """Wait for the host's Crawl-delay turn (for a provider that fetches pages itself with
        another client, as the browser does); no wait when robots.txt set no delay."""
        gate = self.fetcher.gate(urlsplit(url).netloc.lower())
        if gate.min_delay > 0:
            async with gate.slot():
                pass

    async def _entry(self, run_id: int, location: str) -> _Entry:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._locks = {}  # asyncio locks belong to one event loop
            self._loop = loop
        key = (run_id, location)
        entry = self._entries.get(key)
        if entry is not None and entry.expires > time.monotonic():
            return entry
        # One fetch per origin even when a whole batch of its pages arrives at once.
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            entry = self._entries.get(key)
            if entry is not None and entry.expires > time.monotonic():
                return entry
            entry = await self._load(location)
            if len(self._entries) >= MAX_CACHED:
                for old in list(self._entries)[: MAX_CACHED // 10]:
                    del self._entries[old]
                    self._locks.pop(old, None)
            self._entries[key] = entry
            return entry

    async def _load(self, location: str) -> _Entry:
        now = time.monotonic()
        try:
            page = await self.fetcher.fetch(location)
        except FetchError as exc:
            if exc.error_class == ErrorClass.REDIRECTS:
                return _Entry(now + ROBOTS_LIFETIME, None)  # RFC 9309 2.3.1.2: unavailable
            if exc.error_class == ErrorClass.BLOCKED:
                # The origin itself is refused: the page's own fetch says so, in its words.
                return _Entry(now + UNREACHABLE_RETRY, None)
            detail = f"robots.txt could not be read: {exc.detail}"
            failure = Verdict(False, None, exc.error_class, detail)
            return _Entry(now + UNREACHABLE_RETRY, None, failure)
        parser, failure = interpret(page.status, page.body)
        if failure is not None:
            return _Entry(now + UNREACHABLE_RETRY, None, failure)
        delay = parser.crawl_delay(self.agent) if parser is not None else None
        return _Entry(now + ROBOTS_LIFETIME, parser, delay=delay)
