"""The direct provider: fetch each page here, check its state, extract, discover children.

One task = one guarded GET (recovery.fetch.fetcher: outbound safety, per-host gates, per-task
cookies, size cap, total deadline, redirects followed hop by hop), then:

1. the status onto the retry table's classes (`classify_status`);
2. the body decoded strictly in its declared charset: bytes that are invalid there are
   `bad_encoding` (quarantined, not stored with replacement characters: a corrupted title or
   price must not pass as data). With no charset declared, UTF-8, then windows-1252 (HTML's
   default);
3. page-state checks (recovery.fetch.pagechecks), then extraction (recovery.fetch.extraction);
4. children: `links` become `Discovered(discovery="link")` while the child depth stays within
   `max_depth`; a `cursor` link becomes the next page, `discovery="cursor"` with
   `navigation={"cursor": <next URL>, "page": n}`, or `discovery="offset"` with
   `navigation={"offset": k, "page": n}` when the next URL carries an offset parameter
   (provider option `offset_param`, default "offset"). Offsets are navigation only: the
   entities on an offset page become their own tasks, stored by entity key, so a shifting
   listing cannot lose or duplicate a record; after the walk's last page the listing's head is
   re-read until no unseen item can remain (recovery.fetch.drift: "inventory drift").

A task of page type `@sitemap` is a sitemap file (recovery.fetch.sitemaps): fetched the same way
(robots.txt, guard, gates) with the protocol's 50 MB cap, its child sitemaps or URLs become
its children.

robots.txt (recovery.fetch.robots) is read per origin before the first page of a host is fetched;
a refused URL is `robots_disallowed` without a request, and Crawl-delay raises the host's
spacing. A spec opts out only with `robots = { obey = false, reason = "..." }`, which ignores
the rules but keeps the Crawl-delay unless it also says `crawl_delay = false`.

Two answers are deferrals, not failures (Outcome.deferred: back to retry_wait, no attempt
counted): an origin whose robots.txt is unreachable for now, and a page whose host's shared
turn (recovery.fetch.hostslots) is further away than a batch should wait, or whose shared seats
(`per_host` set by the spec: recovery.fetch.hostseats) stay taken as long. A listing walk whose
pages state a total records it against the items found at its last page
(recovery.fetch.listing_totals); a head re-read that fails fails that page with its class.

Provider options (the dataset's `provider_options`; no secrets): concurrency, per_host,
min_delay, max_host_delay, connect_timeout, read_timeout, deadline, max_bytes, max_redirects,
max_links, max_pages, offset_param, transport, refusal_retries (default 2) and
refusal_retry_seconds (default 600): a 401/403 is `auth_refused`, retried that many times that
far apart, then `access_denied` (quarantined; `auth_verdict`). The allow-list of private
networks is a deployment setting (SALVAGE_ALLOWED_NETWORKS) and cannot be widened by a spec.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from selectolax.lexbor import LexborHTMLParser

from recovery import failures
from recovery.archive import store as archive_store
from recovery.fetch import drift, extraction, listing_totals, robots, sitemaps
from recovery.fetch.clients import TRANSPORTS
from recovery.fetch.errors import FetchError, TurnDeferred
from recovery.fetch.fetcher import Fetcher
from recovery.fetch.pagechecks import PageCheckFailure, PageView, check_page
from recovery.fetch.responses import Page
from recovery.keys import canonical_url
from recovery.ops.logs import redact
from recovery.outcomes import Discovered, ErrorClass, Observed, Outcome, TaskInput
from recovery.providers.registry import register

log = logging.getLogger(__name__)

BODY_EXCERPT_BYTES = 2048
SERVER_STATUSES = frozenset({500, 502, 503, 504})

# option -> (type, minimum); anything else in provider_options is refused by name.
OPTIONS: dict[str, tuple[type, float]] = {
    "concurrency": (int, 1),
    "per_host": (int, 1),
    "min_delay": (float, 0),
    "max_host_delay": (float, 0),
    "connect_timeout": (float, 0.01),
    "read_timeout": (float, 0.01),
    "deadline": (float, 0.01),
    "max_bytes": (int, 1024),
    "max_redirects": (int, 0),
    "max_links": (int, 1),
    "max_pages": (int, 1),
    "offset_param": (str, 0),
    "transport": (str, 0),
    # A first 401/403 is retried (a block often lifts, a session may have been refused): up
    # to `refusal_retries` times, `refusal_retry_seconds` apart; then it quarantines (auth_verdict).
    "refusal_retries": (int, 0),
    "refusal_retry_seconds": (float, 1),
}
REFUSAL_RETRIES = 2  # default: three claims that all answer 401/403 make it persistent
REFUSAL_RETRY_SECONDS = 600.0  # default: ten minutes, not seconds (a block lifts later, if at all)


def parse_options(options: dict[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in options.items():
        if key not in OPTIONS:
            raise ValueError(
                f"provider_options.{key}: unknown option for the direct provider "
                f"(known: {', '.join(sorted(OPTIONS))})"
            )
        kind, minimum = OPTIONS[key]
        if kind is str:
            if not isinstance(value, str) or not value:
                raise ValueError(f"provider_options.{key}: must be a non-empty string")
            if key == "transport" and value not in TRANSPORTS:
                # At load time, not when the first worker builds its Fetcher.
                raise ValueError(
                    f"provider_options.transport: {value!r} is not one of {', '.join(TRANSPORTS)}"
                )
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"provider_options.{key}: must be a number")
            if kind is int and value != int(value):
                raise ValueError(f"provider_options.{key}: must be an integer")
            if value < minimum:
                raise ValueError(f"provider_options.{key}: must be >= {minimum}")
            value = kind(value)
        clean[key] = value
    if "refusal_retry_seconds" in clean:
        from django.conf import settings

        cap = settings.SALVAGE_RETRY_AFTER_CAP
        if clean["refusal_retry_seconds"] > cap:
            # The engine caps every server-asked wait at SALVAGE_RETRY_AFTER_CAP: a longer
            # interval would silently be shortened, so refuse it where the spec is read.
            raise ValueError(
                f"provider_options.refusal_retry_seconds: must be <= {cap} "
                "(SALVAGE_RETRY_AFTER_CAP, the longest wait the engine schedules)"
            )
    return clean


def classify_status(status: int) -> ErrorClass | None:
    """The retry table's class for an HTTP status; None for a success to be checked further."""
    if 200 <= status < 300:
        return None
    if status == 429:
        return ErrorClass.RATE_LIMITED
    if status in (401, 403):
        # Retried a bounded number of times first; DirectProvider.auth_verdict turns a
        # persistent one into ErrorClass.ACCESS (quarantined: a person must act).
        return ErrorClass.AUTH_REFUSED
    if status in (404, 410):
        return ErrorClass.NOT_FOUND
    if status == 408:
        return ErrorClass.NETWORK  # the server timed the request out: transient
    if status in SERVER_STATUSES or 500 <= status < 600:
        return ErrorClass.SERVER
    return ErrorClass.CLIENT_ERROR  # other 4xx, and 1xx/3xx that are not usable redirects


def retry_after_seconds(page: Page) -> float | None:
    """Retry-After in seconds, measured against the response's own Date header when it has
    one, so a skewed local clock does not shorten or stretch the wait."""
    value = page.headers.get("retry-after")
    if value is None:
        return None
    now = datetime.now(UTC)
    date = page.headers.get("date")
    if date:
        try:
            server_now = parsedate_to_datetime(date)
            if server_now.tzinfo is None:
                server_now = server_now.replace(tzinfo=UTC)
            now = server_now
        except (TypeError, ValueError, IndexError):
            pass
    return failures.parse_retry_after(value, now)


def artefact(page: Page | None, reason: str, *, context: dict[str, Any] | None = None) -> dict:
    """Status, response headers without credentials, a bounded and redacted body excerpt."""
    out: dict[str, Any] = {"reason": redact(reason)}
    if page is not None:
        out["status"] = page.status
        # Credential-named headers are dropped by sanitise_artefact; values are redacted too.
        out["headers"] = {k: redact(v) for k, v in page.headers.items()}
        out["content_type"] = page.headers.get("content-type", "")
        excerpt = page.body[:BODY_EXCERPT_BYTES].decode("utf-8", "replace")
        out["body_excerpt"] = redact(excerpt)
    elif context and context.get("status") is not None:
        out["status"] = context["status"]
    hops = (context or {}).get("hops") or (page.hops if page is not None else [])
    if len(hops) > 1:
        out["reason"] += " [" + redact(" -> ".join(hops)) + "]"
    return failures.sanitise_artefact(out)


@register("direct")
class DirectProvider:
    name = "direct"

    def __init__(self, **options: Any) -> None:
        from django.conf import settings

        self.options = parse_options(options)
        o = self.options
        self.concurrency = o.get("concurrency", settings.SALVAGE_CONCURRENCY)
        self.max_links = o.get("max_links", 1000)
        self.max_pages = o.get("max_pages", 100_000)
        self.offset_param = o.get("offset_param", "offset")
        self.refusal_retries = o.get("refusal_retries", REFUSAL_RETRIES)
        self.refusal_retry_seconds = o.get("refusal_retry_seconds", REFUSAL_RETRY_SECONDS)
        self._semaphore: asyncio.Semaphore | None = None
        self._semaphore_loop: asyncio.AbstractEventLoop | None = None
        self.fetcher = Fetcher(
            transport=o.get("transport", "aiohttp"),
            concurrency=self.concurrency,
            per_host=o.get("per_host", 8),
            min_delay=o.get("min_delay", 0.0),
            max_host_delay=o.get("max_host_delay", 2.0),
            connect_timeout=o.get("connect_timeout", 5.0),
            read_timeout=o.get("read_timeout", 15.0),
            deadline=o.get("deadline"),
            max_bytes=o.get("max_bytes"),
            max_redirects=o.get("max_redirects", 5),
            shared_seats=shares_per_host(o, self.concurrency),
        )
        self.robots = robots.RobotsPolicy(self.fetcher, settings.SALVAGE_USER_AGENT)

    def _gate(self) -> asyncio.Semaphore:
        # One bound per provider instance (the worker keeps one per process and may call
        # execute_many from several lanes at once), re-created if the event loop changes.
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore_loop is not loop:
            self._semaphore = asyncio.Semaphore(self.concurrency)
            self._semaphore_loop = loop
        return self._semaphore

    async def execute_many(self, tasks: list[TaskInput]) -> list[Outcome]:
        gate = self._gate()
        outcomes: list[Outcome] = [None] * len(tasks)  # type: ignore[list-item]
        order = iter(range(len(tasks)))

        async def lane() -> None:
            # `concurrency` lanes take the tasks in order, rather than one asyncio task per
            # page waiting on the gate (a Task, a future and a wake-up per page saved); the
            # gate still bounds this provider across concurrent calls.
            for i in order:
                async with gate:
                    started = time.monotonic()
                    try:
                        outcome = await self.execute(tasks[i])
                    except Exception as exc:  # a bug here must not lose the other results
                        log.exception("direct provider failed on task %s", tasks[i].task_id)
                        outcome = Outcome(
                            error_class=ErrorClass.INTERNAL,
                            error_detail=f"{type(exc).__name__}: {exc}",
                            artefact={"reason": redact(f"{type(exc).__name__}: {exc}")},
                        )
                    outcome.elapsed_s = time.monotonic() - started
                    outcomes[i] = outcome

        await asyncio.gather(*(lane() for _ in range(min(self.concurrency, len(tasks)))))
        return outcomes

    async def aclose(self) -> None:
        await self.fetcher.aclose()

    async def execute(self, task: TaskInput) -> Outcome:
        return self.auth_verdict(task, await self.run_page(task))

    def auth_verdict(self, task: TaskInput, outcome: Outcome) -> Outcome:
        return auth_verdict(
            outcome, task.attempt_count, self.refusal_retries, self.refusal_retry_seconds
        )

    async def run_page(self, task: TaskInput) -> Outcome:
        if task.page_type == sitemaps.SITEMAP_PAGE_TYPE:
            return await self.read_sitemap(task)
        page_spec = (task.spec.get("page_types") or {}).get(task.page_type)
        if page_spec is None:
            reason = f"page type {task.page_type!r} is not defined in the dataset spec"
            return _failure(ErrorClass.SELECTOR, reason, None)
        page, kept = await self.page_for(task)
        if isinstance(page, Outcome):
            return page
        outcome = await self.read_page(task, page, page_spec)
        if kept is not None:
            # The archive's pointer commits with this outcome, on its Attempt (recovery.archive).
            outcome.artefact = {**(outcome.artefact or {}), "archive": kept}
        return outcome

    async def page_for(self, task: TaskInput) -> tuple[Page | Outcome, dict[str, str] | None]:
        """The page to check and extract, and the archive's note on it: the stored copy a
        "from the archive" batch named (no request at all: no robots.txt, no host turn), else
        the page fetched now, archived before its checks run so a page they reject is kept."""
        if task.archived:
            try:
                stored = archive_store.get(task.archived)
            except archive_store.ArchiveMissing as exc:
                # Not an error: the batch fetches this page, and counts it as fetched.
                log.info("task %s: %s; fetching it", task.task_id, exc)
            else:
                page = Page(
                    url=stored.url,
                    status=stored.status,
                    headers=httpx.Headers(stored.headers),
                    body=stored.body,
                    hops=stored.hops,
                )
                return page, {"sha256": task.archived, "source": "archive"}
        fetched = await self.fetch_ok(task)
        if isinstance(fetched, Outcome):
            return fetched, None
        return fetched, await self.archive(fetched)

    @staticmethod
    async def archive(page: Page) -> dict[str, str] | None:
        """Store a fetched 2xx page in the archive; the note its attempt records."""
        from django.conf import settings

        if not settings.SALVAGE_ARCHIVE_PAGES:
            return None
        try:
            # In a thread: a file write stalls on a busy disk, and on this event loop it would
            # stall every page in flight (bench/archive.py measured it).
            stored = await asyncio.to_thread(
                archive_store.put,
                page.url,
                page.status,
                page.headers.multi_items(),
                page.body,
                page.hops,
            )
        except OSError as exc:
            # A full or unwritable archive must not fail the page: it is only not kept.
            log.warning("page archive: cannot store %s: %s", redact(page.url), exc)
            return {"source": "fetched", "skipped": f"not archived: {type(exc).__name__}"}
        if stored.skipped:
            return {"source": "fetched", "skipped": stored.skipped}
        return {"sha256": stored.sha256, "source": "fetched"}

    async def read_page(self, task: TaskInput, page: Page, page_spec: dict[str, Any]) -> Outcome:
        """Page checks, extraction and children of a 2xx page, fetched or archived."""
        try:
            text, _encoding, _lossy = page.text()
        except FetchError as exc:
            return _failure(exc.error_class, exc.detail, page)
        # Entirely CPU-bound from here (~0.1 ms for a 5 KB page): no await until done.
        view = PageView(LexborHTMLParser(text))
        try:
            check_page(view, page_spec)
            outcome = self.extract(task, page, view, page_spec)
        except PageCheckFailure as exc:
            return _failure(exc.error_class, exc.reason, page)
        except extraction.ExtractionError as exc:
            return _failure(ErrorClass.SELECTOR, str(exc), page)
        if self.walk_ended(page_spec, outcome):
            return await self.end_walk(task, page, view, page_spec, outcome)
        return outcome

    @staticmethod
    def walk_ended(page_spec: dict[str, Any], outcome: Outcome) -> bool:
        """The last page of a listing walk: a page with a cursor and item links that found
        no next page."""
        if "cursor" not in page_spec or "links" not in page_spec:
            return False
        return not any(d.discovery in ("offset", "cursor") for d in outcome.discovered)

    async def end_walk(
        self,
        task: TaskInput,
        page: Page,
        view: PageView,
        page_spec: dict[str, Any],
        outcome: Outcome,
    ) -> Outcome:
        """After a walk's last page: an offset walk's head is re-read (recovery.fetch.drift;
        a read that fails fails this page, with its class), and a walk whose pages state a
        total records it against the items found (recovery.fetch.listing_totals)."""
        total_spec = page_spec["cursor"].get("total")
        stated = extraction.listing_total(view.tree, total_spec)
        listed_here = [d.url for d in outcome.discovered if d.discovery == "link"]
        head: list[str] = []
        if self.offset_walk(task):
            try:
                head, head_total = await drift.recheck_head(
                    self.fetcher,
                    page.url,
                    page_spec,
                    offset_param=self.offset_param,
                    start_total=task.navigation.get(drift.TOTAL_KEY, stated),
                    max_links=self.max_links,
                )
            except drift.HeadReadFailed as exc:
                return head_failure(exc)
            stated = head_total if head_total is not None else stated
            outcome.discovered.extend(
                drift.drift_children(
                    head, page_spec["links"]["page_type"], lambda u: self.partition_for(task, u)
                )
            )
        if total_spec and stated is not None:
            mine = set(listed_here)
            await listing_totals.record(
                task.run_id,
                task.navigation.get(listing_totals.WALK_KEY, task.url),
                task.page_type,
                stated,
                int(task.navigation.get(listing_totals.LISTED_KEY, 0)) + len(listed_here),
                [u for u in head if u not in mine],
                (task.dataset, task.window, page_spec["links"]["page_type"]),
            )
        return outcome

    async def read_sitemap(self, task: TaskInput) -> Outcome:
        """One sitemap file (or a robots.txt's Sitemap: lines): its child sitemaps or its URLs,
        all or nothing."""
        config = task.navigation.get("sitemap")
        if not isinstance(config, dict) or not (config.get("page_type") or config.get("rules")):
            return _failure(ErrorClass.INTERNAL, "sitemap task without its configuration", None)
        robots_txt = sitemaps.is_robots_txt(task.url)
        # RFC 9309 2.2.2: robots.txt itself is always allowed, whatever its rules say.
        page = await self.fetch_ok(task, check_robots=not robots_txt, max_bytes=sitemaps.MAX_BYTES)
        if isinstance(page, Outcome):
            return page
        try:
            # CPU-bound (~0.1 s for 50,000 URLs), like a page's extraction.
            if robots_txt:
                parsed = sitemaps.parse_robots(page.body, page.url)
            else:
                parsed = sitemaps.parse(page.body, page.url)
            return sitemaps.outcome(
                parsed,
                status=page.status,
                config=config,
                partition_for=lambda url: self.partition_for(task, url),
            )
        except sitemaps.SitemapError as exc:
            return _failure(exc.error_class, exc.detail, page)

    async def fetch_ok(
        self, task: TaskInput, *, check_robots: bool = True, **limits: Any
    ) -> Page | Outcome:
        """The task's page when robots.txt allows it and it answered 2xx; otherwise the
        outcome that files the refusal, the fetch error or the HTTP status."""
        refusal = await self.robots_refusal(task) if check_robots else None
        if refusal is not None:
            return refusal
        try:
            page = await self.fetcher.fetch(task.url, may_defer=True, **limits)
        except TurnDeferred as exc:
            return deferral(exc)
        except FetchError as exc:
            return Outcome(
                http_status=exc.context.get("status"),
                error_class=exc.error_class,
                error_detail=redact(exc.detail),
                artefact=artefact(None, exc.detail, context=exc.context),
            )
        error_class = classify_status(page.status)
        if error_class is not None:
            outcome = _failure(error_class, f"HTTP {page.status}", page)
            if page.status in (429, 503):
                # RFC 9110 gives Retry-After to both; the engine waits that long, capped.
                outcome.retry_after = retry_after_seconds(page)
            return outcome
        return page

    def offset_walk(self, task: TaskInput) -> bool:
        """A page of an offset walk (its head is re-read after its last page)."""
        return "offset" in task.navigation or (
            extraction.offset_of(task.url, self.offset_param) is not None
        )

    async def robots_refusal(self, task: TaskInput) -> Outcome | None:
        """None when robots.txt lets this task's URL be fetched (or the dataset opted out);
        otherwise the outcome that stands in for the fetch that never happens."""
        obeys = robots.obeys(task.spec)
        if not obeys and not robots.keeps_crawl_delay(task.spec):
            return None
        # Reading the verdict applies the site's Crawl-delay to the host's gate, which an
        # opt-out from the rules keeps (unless the spec also gives up the delay, with reason).
        verdict = await self.robots.check(task.run_id, task.url)
        if verdict.allowed or not obeys:
            return None
        if verdict.wait is not None:
            # robots.txt unreachable for now (or being read by another worker): the page
            # waits for its next read, spending no attempt (RFC 9309 2.3.1.3).
            return Outcome(
                error_class=verdict.error_class,
                error_detail=redact(verdict.detail),
                retry_after=verdict.wait,
                deferred=True,
            )
        error_class = verdict.error_class or ErrorClass.ROBOTS_DISALLOWED
        return Outcome(
            error_class=error_class,
            error_detail=redact(verdict.detail),
            artefact=artefact(None, verdict.detail),
        )

    def extract(
        self, task: TaskInput, page: Page, view: PageView, page_spec: dict[str, Any]
    ) -> Outcome:
        tree = view.tree
        outcome = Outcome(http_status=page.status)
        fields = page_spec.get("fields") or {}
        if fields:
            values = extraction.extract_fields(tree, fields)
            key = extraction.entity_key(task.spec, values, task.url)
            outcome.observations.append(Observed(entity_key=key, payload=values))
        depth = link_depth(task)
        links = page_spec.get("links")
        listed = 0
        if links and depth + 1 <= links.get("max_depth", 1):
            # The engine sets a child's depth to its parent's + 1 for every discovery, so
            # after pagination it no longer counts links; say the link depth when it differs.
            child_nav = {} if depth == task.depth else {"link_depth": depth + 1}
            for url in extraction.extract_links(tree, links, page.url, limit=self.max_links):
                listed += 1
                outcome.discovered.append(
                    Discovered(
                        url=url,
                        page_type=links["page_type"],
                        partition=self.partition_for(task, url),
                        navigation=dict(child_nav),
                        discovery="link",
                    )
                )
        cursor = page_spec.get("cursor")
        if cursor:
            page_no = int(task.navigation.get("page", 1))
            next_url = extraction.extract_cursor(tree, cursor, page.url)
            if next_url is not None and page_no < self.max_pages:
                offset = extraction.offset_of(next_url, self.offset_param)
                if offset is not None:
                    mode, navigation = "offset", {"offset": offset, "page": page_no + 1}
                    # The total the walk began with, for the head re-read at its end.
                    start = task.navigation.get(drift.TOTAL_KEY)
                    if start is None:
                        start = extraction.listing_total(tree, cursor.get("total"))
                    if start is not None:
                        navigation[drift.TOTAL_KEY] = start
                else:
                    mode, navigation = "cursor", {"cursor": next_url, "page": page_no + 1}
                if depth != task.depth + 1:  # the next page is as deep in links as this one
                    navigation["link_depth"] = depth
                if cursor.get("total"):
                    # The walk's count so far, for its stated total (fetch.listing_totals).
                    navigation[listing_totals.WALK_KEY] = task.navigation.get(
                        listing_totals.WALK_KEY, task.url
                    )
                    navigation[listing_totals.LISTED_KEY] = (
                        int(task.navigation.get(listing_totals.LISTED_KEY, 0)) + listed
                    )
                outcome.discovered.append(
                    Discovered(
                        url=next_url,
                        page_type=task.page_type,
                        partition=task.partition,
                        navigation=navigation,
                        discovery=mode,
                    )
                )
        return outcome

    @staticmethod
    def partition_for(task: TaskInput, url: str) -> str:
        rule = (task.spec.get("partition") or {}).get("rule", "host")
        if rule == "host":
            return urlsplit(canonical_url(url)).hostname or task.partition
        # manifest: inherited; field:<name>: unknown until the child is fetched, so inherited.
        return task.partition


def auth_verdict(
    outcome: Outcome,
    attempt_count: int,
    retries: int = REFUSAL_RETRIES,
    interval: float = REFUSAL_RETRY_SECONDS,
) -> Outcome:
    """A 401/403 (`auth_refused`) is retried `interval` seconds later while this claim is
    within the first `retries` + 1; after that it is persistent: `access_denied`, quarantined
    for a person. The count is the task's claims (attempt_count, this one included), so it can
    only make a refusal persistent sooner (after a 5xx or a lost worker), never retry it more.
    Each retry is a new claim, so a new Fetcher cookie jar: the retry starts a fresh session."""
    if outcome.error_class is not ErrorClass.AUTH_REFUSED:
        return outcome
    if attempt_count > retries:
        outcome.error_class = ErrorClass.ACCESS
        outcome.error_detail = (
            f"{outcome.error_detail}: still refused on attempt {attempt_count} "
            f"(persistent after {retries} auth retries)"
        )
        outcome.retry_after = None
    else:
        outcome.retry_after = interval
    return outcome


def link_depth(task: TaskInput) -> int:
    """How many links from a manifest page this task is (pagination does not count)."""
    value = task.navigation.get("link_depth")
    return value if isinstance(value, int) and value >= 0 else task.depth


def head_failure(exc: drift.HeadReadFailed) -> Outcome:
    """A walk's last page whose head re-read failed: the read's own class (retried)."""
    if exc.page is not None:
        error_class = classify_status(exc.page.status) or ErrorClass.CLIENT_ERROR
        outcome = _failure(error_class, exc.detail, exc.page)
        if exc.page.status in (429, 503):
            outcome.retry_after = retry_after_seconds(exc.page)
        return outcome
    return Outcome(
        http_status=exc.context.get("status"),
        error_class=exc.error_class or ErrorClass.NETWORK,
        error_detail=redact(exc.detail),
        artefact=artefact(None, exc.detail, context=exc.context),
    )


def shares_per_host(options: dict[str, Any], concurrency: int) -> bool:
    """Whether every worker keeps the spec's `per_host` together (recovery.fetch.hostseats),
    at two statements a request. A per_host the spec states below its concurrency is a limit
    the site is owed; the default (8), or one at or above the concurrency (the sandbox's spec
    and the benchmarks write `per_host = concurrency`: no per-host bound in a worker), stays
    per process and costs nothing."""
    per_host = options.get("per_host")
    return per_host is not None and per_host < concurrency


def deferral(exc: TurnDeferred) -> Outcome:
    """A page whose host's shared turn is too far away: back to retry_wait until then."""
    return Outcome(error_detail=exc.detail, retry_after=exc.wait, deferred=True)


def _failure(error_class: ErrorClass, reason: str, page: Page | None) -> Outcome:
    return Outcome(
        http_status=page.status if page is not None else None,
        error_class=error_class,
        error_detail=redact(reason),
        artefact=artefact(page, reason),
    )
