"""robots.txt, obeyed by default (RFC 9309), for the providers that fetch pages themselves.

Before a task's page is fetched, its origin's `/robots.txt` is read through the same guarded
`Fetcher` as the page (outbound safety, per-host gate, redirects hop by hop), parsed with
`protego` (Scrapy's parser) and kept for ROBOTS_LIFETIME seconds per (run, origin): a run sees
one consistent policy per host, and a long run re-reads it at most hourly (RFC 9309 2.4 asks
for no more than 24 hours). In a worker one read serves every worker of the run: the first to
claim the origin reads it, the others use its answer (recovery.fetch.robots_state); outside a
worker (no recovery.fetch.servant) each process reads and remembers it alone. Why protego
rather than urllib.robotparser: the standard parser applies the first matching rule instead of
the longest match, so `Disallow: /shop` before `Allow: /shop/public` refuses /shop/public, and
it does not understand `*` or `$` in paths (tests/unit/test_robots.py shows both cases against
both parsers).

What each answer means (RFC 9309 2.3.1):
- 2xx: the rules apply to the product token of SALVAGE_USER_AGENT (`Salvage`), falling back to
  the `*` group. A refused URL ends as `robots_disallowed`: terminal, visible, never fetched.
  `Crawl-delay` raises the host gate's minimum spacing (capped at MAX_CRAWL_DELAY seconds).
- 4xx other than 429, and a redirect chain too long to follow: "unavailable", everything is
  allowed.
- 5xx, 429 and network failures: "unreachable", complete disallow for now (RFC 9309 2.3.1.3).
  robots.txt is read again after its own back-off (robots_state.backoff: exponential, capped,
  at least a Retry-After), and meanwhile the origin's pages are *deferred* to the end of the
  back-off (Outcome.deferred: back to retry_wait, no attempt counted, no budget spent). Once
  it stayed unreachable past SALVAGE_ROBOTS_UNREACHABLE_LIMIT (24 h) its pages end as
  `robots_unreachable` (dead: the retry table's row).
- An origin refused by outbound safety is left to the page's own fetch, which refuses it as
  `blocked_url`; another local failure (e.g. over the size cap) keeps its own class.

A dataset opts out only with `robots = { obey = false, reason = "..." }` in its spec
(docs/spec-format.md); saving such a spec writes the reason to the audit log. Opting out of the
rules keeps the Crawl-delay (robots.txt is still read for it) unless the spec also says
`crawl_delay = false`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import SplitResult, urlsplit, urlunsplit

from protego import Protego

from recovery.fetch import robots_state, servant
from recovery.fetch.errors import FetchError
from recovery.fetch.fetcher import Fetcher
from recovery.fetch.hostgate import HostGate
from recovery.fetch.responses import Page
from recovery.fetch.robots_state import ROBOTS_LIFETIME, Answer, Shared
from recovery.outcomes import ErrorClass

LOCAL_RETRY = 30.0  # seconds a local failure (over the size cap...) is kept before a new read
MAX_CRAWL_DELAY = 60.0  # a larger Crawl-delay is honoured as this many seconds
MAX_CACHED = 10_000  # origins kept per provider; the oldest are dropped beyond it
POLL = 0.1  # seconds between looks at a robots.txt another worker is reading
BEING_READ_WAIT = 1.0  # seconds a page is deferred while another worker still reads it

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    """May this URL be fetched? `error_class` is set when robots.txt itself could not be read;
    `wait` (seconds) when the page is to be deferred that long rather than refused."""

    allowed: bool
    crawl_delay: float | None = None
    error_class: ErrorClass | None = None
    detail: str = ""
    wait: float | None = None


@dataclass(slots=True)
class _Entry:
    expires: float  # monotonic
    parser: Protego | None  # None: allow everything (robots.txt unavailable)
    failure: Verdict | None = None  # set when robots.txt could not be read
    delay: float | None = None  # the parser's Crawl-delay for our agent, read once
    # Unreachable reads in a row and since when (monotonic): this process's own back-off,
    # used when no worker serves the shared state (recovery.fetch.servant).
    failures: int = 0
    failing_since: float | None = None
    deferrable: bool = False  # failure: the page waits until `expires`, it is not refused


def product_token(user_agent: str) -> str:
    """`Salvage/0.1 (+url)` -> `Salvage`: the name robots.txt groups are matched against."""
    return (user_agent.split("/", 1)[0].split() or ["*"])[0]


def robots_url(url: str) -> str:
    return _robots_url(urlsplit(url))


def _robots_url(parts: SplitResult) -> str:
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), "/robots.txt", "", ""))


def obeys(spec: dict) -> bool:
    """True unless the dataset's spec opts out (with a reason, checked by recovery.intake.specs)."""
    return bool((spec.get("robots") or {}).get("obey", True))


def keeps_crawl_delay(spec: dict) -> bool:
    """Is the site's Crawl-delay honoured? Yes, even when the rules are not obeyed, unless the
    spec also says `crawl_delay = false` (with the same stated reason as `obey = false`)."""
    return bool((spec.get("robots") or {}).get("crawl_delay", True))


def interpret(status: int, body: bytes) -> tuple[Protego | None, Verdict | None]:
    """(parser, failure) for a robots.txt response, per RFC 9309 2.3.1."""
    if 200 <= status < 300:
        # RFC 9309 2.5: at least 500 KiB must be parsed; the fetcher's size cap is larger.
        return Protego.parse(body.decode("utf-8", "replace")), None
    if status == 429 or 500 <= status < 600:
        detail = f"robots.txt unreachable (HTTP {status})"
        return None, Verdict(False, None, ErrorClass.ROBOTS_UNREACHABLE, detail)
    return None, None  # 4xx and anything else: unavailable, allow all


def apply_crawl_delay(gate: HostGate, delay: float) -> None:
    """Raise the host gate's floor: requests to the host are at least `delay` apart."""
    delay = min(delay, MAX_CRAWL_DELAY)
    if delay > gate.min_delay:
        gate.min_delay = delay
        gate.max_delay = max(gate.max_delay, delay)
        gate.interval = max(gate.interval, delay)


def _retry_after(page: Page) -> float | None:
    value = page.headers.get("retry-after")
    if value is None:
        return None
    from recovery import failures

    return failures.parse_retry_after(value, datetime.now(UTC))


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
            if entry.deferrable:  # the page waits for the next read, however long is left
                return replace(entry.failure, wait=max(entry.expires - time.monotonic(), 0.0))
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
        another client, as the browser does); no wait when robots.txt set no delay. Raises
        TurnDeferred when the host's shared turn is too far away to wait for."""
        gate = self.fetcher.gate(urlsplit(url).netloc.lower())
        if gate.min_delay > 0:
            async with gate.slot(may_defer=True):
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
            entry = await self._load(run_id, location, entry)
            if len(self._entries) >= MAX_CACHED:
                for old in list(self._entries)[: MAX_CACHED // 10]:
                    del self._entries[old]
                    self._locks.pop(old, None)
            self._entries[key] = entry
            return entry

    async def _load(self, run_id: int, location: str, previous: _Entry | None) -> _Entry:
        origin = location.removesuffix("/robots.txt")
        shared = await self._claim(run_id, origin)
        if shared is not None and not shared.read:
            # Another worker read it, reads it now, or it is in back-off: use that answer.
            awaited = await self._await_reader(run_id, origin, shared)
            if awaited is None:
                return self._being_read(origin)
            shared = awaited
            if not shared.read:
                return self._from_shared(shared, origin)
        answer = await self._read(location)
        if shared is not None:  # we hold the reading lease: every worker gets this answer
            host = urlsplit(location).netloc.lower()
            try:
                stored = await servant.call(robots_state.record, run_id, origin, answer, host)
            except Exception as exc:  # the database failed: this process keeps its answer
                log.warning("robots.txt of %s: shared state not written (%s)", origin, exc)
            else:
                if answer.state:
                    return self._from_shared(stored, origin)
        return self._local(answer, origin, previous)

    async def _await_reader(self, run_id: int, origin: str, shared: Shared) -> Shared | None:
        """While another worker reads it, look again every POLL seconds for up to
        SALVAGE_POLITENESS_WAIT; None if it is still being read then."""
        from django.conf import settings

        waited, patience = 0.0, float(settings.SALVAGE_POLITENESS_WAIT)
        current: Shared | None = shared
        while current is not None and not current.read and current.reading_for > 0:
            if waited >= patience:
                return None
            await asyncio.sleep(POLL)
            waited += POLL
            current = await self._claim(run_id, origin)
        return current or shared

    async def _claim(self, run_id: int, origin: str) -> Shared | None:
        lease = self.fetcher.limits.deadline + 5.0
        try:
            return await servant.call(robots_state.claim, run_id, origin, lease)
        except servant.Unavailable:
            return None
        except Exception as exc:  # the database failed: read it as one process would
            log.warning("robots.txt of %s: shared state unavailable (%s)", origin, exc)
            return None

    async def _read(self, location: str) -> Answer:
        """One read of robots.txt, as an Answer (RFC 9309 2.3.1)."""
        State = _states()
        try:
            page = await self.fetcher.fetch(location, always_turn=True)
        except FetchError as exc:
            if exc.error_class == ErrorClass.REDIRECTS:
                # RFC 9309 2.3.1.2: too many redirects is "unavailable".
                return Answer(State.UNAVAILABLE, detail=exc.detail[:300])
            if exc.error_class == ErrorClass.NETWORK:
                return Answer(State.UNREACHABLE, detail=f"robots.txt unreachable: {exc.detail}")
            # Refused by outbound safety (the page's own fetch says so), over the size cap:
            # local failures, not the site's.
            detail = f"robots.txt could not be read: {exc.detail}"
            return Answer("", detail=detail, error_class=str(exc.error_class))
        parser, failure = interpret(page.status, page.body)
        if failure is not None:
            return Answer(
                State.UNREACHABLE,
                status=page.status,
                retry_after=_retry_after(page),
                detail=failure.detail,
            )
        if parser is None:
            return Answer(State.UNAVAILABLE, status=page.status, detail=f"HTTP {page.status}")
        delay = parser.crawl_delay(self.agent)
        return Answer(
            State.RULES,
            status=page.status,
            body=page.body,
            crawl_delay=min(float(delay), MAX_CRAWL_DELAY) if delay else None,
        )

    def _from_shared(self, shared: Shared, origin: str) -> _Entry:
        """The entry for what the shared row says (rules, unavailable, or back-off)."""
        now = time.monotonic()
        State = _states()
        if shared.state == State.RULES and shared.body is not None:
            parser = Protego.parse(shared.body)
            delay = parser.crawl_delay(self.agent)
            return _Entry(now + max(shared.fresh_for, 1.0), parser, delay=delay)
        if shared.state == State.UNAVAILABLE:
            return _Entry(now + max(shared.fresh_for, 1.0), None)
        if shared.state in (State.UNREACHABLE, State.GIVEN_UP):
            verdict = _unreachable(origin, shared.detail, shared.failing_for, shared.given_up)
            return _Entry(
                now + max(shared.retry_in, POLL), None, verdict, deferrable=not shared.given_up
            )
        # Rules too large to share: the next look takes the lease and reads them here.
        return _Entry(now, None, _being_read_verdict(origin, POLL), deferrable=True)

    def _being_read(self, origin: str) -> _Entry:
        """Another worker is still reading it: defer the pages a moment, then look again."""
        verdict = _being_read_verdict(origin, BEING_READ_WAIT)
        return _Entry(time.monotonic() + BEING_READ_WAIT, None, verdict, deferrable=True)

    def _local(self, answer: Answer, origin: str, previous: _Entry | None) -> _Entry:
        """The entry for this process's own read (no shared state)."""
        now = time.monotonic()
        State = _states()
        if answer.state == State.RULES:
            parser = Protego.parse((answer.body or b"").decode("utf-8", "replace"))
            return _Entry(now + ROBOTS_LIFETIME, parser, delay=parser.crawl_delay(self.agent))
        if answer.state == State.UNAVAILABLE:
            return _Entry(now + ROBOTS_LIFETIME, None)
        if answer.state == "":
            if answer.error_class == ErrorClass.BLOCKED:
                # The origin itself is refused: the page's own fetch says so, in its words.
                return _Entry(now + LOCAL_RETRY, None)
            failure = Verdict(False, None, ErrorClass(answer.error_class), answer.detail)
            return _Entry(now + LOCAL_RETRY, None, failure)
        failures = (previous.failures if previous is not None else 0) + 1
        since = previous.failing_since if previous is not None else None
        since = now if since is None else since
        from django.conf import settings

        given_up = now - since >= float(settings.SALVAGE_ROBOTS_UNREACHABLE_LIMIT)
        wait = robots_state.backoff(failures, answer.retry_after)
        verdict = _unreachable(origin, answer.detail, now - since, given_up)
        return _Entry(
            now + wait,
            None,
            verdict,
            failures=failures,
            failing_since=since,
            deferrable=not given_up,
        )


def _states():
    from recovery.models import RobotsState

    return RobotsState.State


def _unreachable(origin: str, detail: str, failing_for: float, given_up: bool) -> Verdict:
    if given_up:
        reason = (
            f"{origin}/robots.txt unreachable for {failing_for / 3600:.1f} h ({detail}): its "
            "pages are not fetched (RFC 9309 2.3.1.3)"
        )
        return Verdict(False, None, ErrorClass.ROBOTS_UNREACHABLE, reason)
    reason = f"deferred: {origin}/robots.txt unreachable ({detail}); read again after its back-off"
    return Verdict(False, None, ErrorClass.ROBOTS_UNREACHABLE, reason)


def _being_read_verdict(origin: str, wait: float) -> Verdict:
    return Verdict(
        False, None, None, f"deferred: {origin}/robots.txt is being read by another worker", wait
    )
