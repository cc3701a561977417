"""The browser provider: render each page in headless Chromium, then check, extract, discover.

For pages whose data a script inserts after load (the direct provider sees an empty shell).
Per worker process: one Chromium (recovery.fetch.chromium: Playwright's driver on Debian's
Chromium, killed with the worker), at most `concurrency` contexts open at once and `per_host`
per host, and one fresh context per task (no cookies, storage or cache shared between tasks).

One task, all inside one total `deadline`:
1. the URL is checked as the direct provider checks it (scheme, credentials, numeric host),
   and against the origin's robots.txt with the direct provider's own code (recovery.fetch.robots,
   read through a guarded `Fetcher`): a refused URL is `robots_disallowed`, never navigated to,
   and a Crawl-delay spaces navigations to that host;
2. a context is opened whose only way out is the task's own `GuardedProxy`
   (recovery.fetch.browser_proxy): every request the page makes is checked by the direct provider's
   address policy and connected to the checked address; service workers are blocked;
3. navigation waits for `wait` (load, domcontentloaded, networkidle) and, with `wait_for`, for
   a CSS selector (up to `wait_timeout`; if it never appears, the checks below say why);
4. optional bounded `scroll_steps` and `load_more` clicks (up to `max_steps`);
5. the rendered DOM goes through the same page-state checks (recovery.fetch.pagechecks), extraction
   and discovery as the direct provider's (`DirectProvider.extract`), and the status through
   the same retry-table classes. The rendered HTML of a 2xx page is kept in the page archive
   first (recovery.archive, as the direct provider keeps the bytes it fetched), so a recovery
   batch "from the archive" checks and extracts it again with no browser and no request.

Failures: a refused document is `blocked_url`; refused subresources are listed in the
attempt's artefact (`refused`) whatever the outcome. A page-state or extraction failure keeps a
PNG screenshot (capped at `screenshot_max_bytes`) and the rendered HTML (recovery.fetch.artefacts).
The deadline, navigation timeouts and network errors are `network` (retried); a browser that
crashed or stopped answering is `network` too and is relaunched for the next task; anything
unexpected is `internal_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from selectolax.lexbor import LexborHTMLParser

from recovery import failures
from recovery.archive import store as archive_store
from recovery.fetch import artefacts, extraction, robots
from recovery.fetch.browser_proxy import GuardedProxy
from recovery.fetch.chromium import BrowserMissing, close_shared, shared
from recovery.fetch.errors import BlockedURL, TurnDeferred
from recovery.fetch.fetcher import Fetcher
from recovery.fetch.guard import AddressGuard, default_port
from recovery.fetch.pagechecks import PageCheckFailure, PageView, check_page
from recovery.fetch.responses import Page
from recovery.ops.logs import redact
from recovery.outcomes import ErrorClass, Outcome, TaskInput
from recovery.providers.direct import (
    BODY_EXCERPT_BYTES,
    DirectProvider,
    auth_verdict,
    classify_status,
    deferral,
)
from recovery.providers.registry import register

log = logging.getLogger(__name__)

WAITS = ("load", "domcontentloaded", "networkidle")
RESOURCE_TYPES = (
    "stylesheet",
    "image",
    "media",
    "font",
    "script",
    "texttrack",
    "xhr",
    "fetch",
    "eventsource",
    "websocket",
    "manifest",
    "other",
)
DEFAULT_BLOCK = ("image", "font", "media")
MAX_STEPS = 50
CLOSE_TIMEOUT = 5.0

# option -> (type, minimum, maximum); anything else in provider_options is refused by name.
OPTIONS: dict[str, tuple[type, float, float | None]] = {
    "concurrency": (int, 1, 256),
    "per_host": (int, 1, 256),
    "deadline": (float, 0.5, 600),
    "wait": (str, 0, None),
    "wait_for": (str, 0, None),
    "wait_timeout": (float, 0.05, 600),
    "block": (list, 0, None),
    "scroll_steps": (int, 0, MAX_STEPS),
    "load_more": (str, 0, None),
    "max_steps": (int, 0, MAX_STEPS),
    "step_timeout": (float, 0.05, 60),
    "viewport_width": (int, 200, 4096),
    "viewport_height": (int, 200, 4096),
    "user_agent": (str, 0, None),
    "max_bytes": (int, 1024, None),
    "screenshot_max_bytes": (int, 1024, 20_000_000),
    "max_links": (int, 1, None),
    "max_pages": (int, 1, None),
    "offset_param": (str, 0, None),
}


def parse_options(options: dict[str, Any]) -> dict[str, Any]:
    """The provider's options, checked; ValueError names the bad option."""
    clean: dict[str, Any] = {}
    for key, value in options.items():
        if key not in OPTIONS:
            raise ValueError(
                f"provider_options.{key}: unknown option for the browser provider "
                f"(known: {', '.join(sorted(OPTIONS))})"
            )
        kind, minimum, maximum = OPTIONS[key]
        if kind is str:
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"provider_options.{key}: must be a non-empty string")
        elif kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"provider_options.{key}: must be a list of resource types")
            unknown = sorted(set(value) - set(RESOURCE_TYPES))
            if unknown:
                raise ValueError(
                    f"provider_options.{key}: unknown resource type(s) {', '.join(unknown)} "
                    f"(known: {', '.join(RESOURCE_TYPES)}; the document itself cannot be blocked)"
                )
            value = sorted(set(value))
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"provider_options.{key}: must be a number")
            if kind is int and value != int(value):
                raise ValueError(f"provider_options.{key}: must be an integer")
            if value < minimum:
                raise ValueError(f"provider_options.{key}: must be >= {minimum}")
            if maximum is not None and value > maximum:
                raise ValueError(f"provider_options.{key}: must be <= {maximum}")
            value = kind(value)
        clean[key] = value
    if "wait" in clean and clean["wait"] not in WAITS:
        raise ValueError(f"provider_options.wait: must be one of {', '.join(WAITS)}")
    if "max_steps" in clean and "load_more" not in clean:
        raise ValueError("provider_options.max_steps: needs load_more (the button to click)")
    return clean


class _DeadlineExceeded(Exception):
    pass


@register("browser")
class BrowserProvider:
    name = "browser"
    # Discovery and extraction are the direct provider's own code, run on the rendered DOM.
    extract = DirectProvider.extract
    partition_for = staticmethod(DirectProvider.partition_for)
    robots_refusal = DirectProvider.robots_refusal

    def __init__(self, **options: Any) -> None:
        from django.conf import settings

        self.options = parse_options(options)
        o = self.options
        self.executable = settings.SALVAGE_CHROMIUM
        self.concurrency = o.get("concurrency", min(settings.SALVAGE_CONCURRENCY, 8))
        self.per_host = o.get("per_host", self.concurrency)
        self.deadline = o.get("deadline", settings.SALVAGE_REQUEST_DEADLINE)
        self.wait = o.get("wait", "load")
        self.wait_for = o.get("wait_for")
        self.wait_timeout = o.get("wait_timeout", 10.0)
        self.block = frozenset(o.get("block", DEFAULT_BLOCK))
        self.scroll_steps = o.get("scroll_steps", 0)
        self.load_more = o.get("load_more")
        self.max_steps = o.get("max_steps", 10)
        self.step_timeout = o.get("step_timeout", 2.0)
        self.viewport = {
            "width": o.get("viewport_width", 1280),
            "height": o.get("viewport_height", 800),
        }
        self.user_agent = o.get("user_agent", settings.SALVAGE_USER_AGENT)
        self.max_bytes = o.get("max_bytes", settings.SALVAGE_MAX_RESPONSE_BYTES)
        self.screenshot_max_bytes = o.get(
            "screenshot_max_bytes", settings.SALVAGE_SCREENSHOT_MAX_BYTES
        )
        self.max_links = o.get("max_links", 1000)
        self.max_pages = o.get("max_pages", 100_000)
        self.offset_param = o.get("offset_param", "offset")
        # Fail at construction on a bad allow-list, not on the first task.
        self.guard = AddressGuard.from_settings()
        # robots.txt is read by the guarded client, not the browser: the same rules and cache
        # as the direct provider, and its host gates carry the Crawl-delay spacing.
        self.robots = robots.RobotsPolicy(
            Fetcher(per_host=self.per_host, user_agent=self.user_agent), self.user_agent
        )
        self._gates: dict[str, asyncio.Semaphore] = {}
        self._pool: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _bounds(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop:
            self._pool = asyncio.Semaphore(self.concurrency)
            self._gates = {}
            self._loop = loop
        return self._pool

    def _host_gate(self, url: str) -> asyncio.Semaphore:
        host = urlsplit(url).netloc.lower()
        gate = self._gates.get(host)
        if gate is None:
            if len(self._gates) > 10_000:
                self._gates = {h: g for h, g in self._gates.items() if g.locked()}
            gate = self._gates[host] = asyncio.Semaphore(self.per_host)
        return gate

    async def execute_many(self, tasks: list[TaskInput]) -> list[Outcome]:
        pool = self._bounds()

        async def one(task: TaskInput) -> Outcome:
            async with self._host_gate(task.url), pool:
                started = time.monotonic()
                try:
                    outcome = await self.execute(task)
                except BrowserMissing as exc:
                    outcome = _failure(ErrorClass.INTERNAL, str(exc))
                except Exception as exc:  # a bug here must not lose the other tasks' results
                    log.exception("browser provider failed on task %s", task.task_id)
                    outcome = _failure(ErrorClass.INTERNAL, f"{type(exc).__name__}: {exc}")
                outcome.elapsed_s = time.monotonic() - started
                return outcome

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    async def aclose(self) -> None:
        # The worker closes its providers when it stops: the browser goes with them (another
        # provider instance on this loop would start a new one on its next task).
        await close_shared()
        await self.robots.fetcher.aclose()

    async def execute(self, task: TaskInput) -> Outcome:
        page_spec = (task.spec.get("page_types") or {}).get(task.page_type)
        if page_spec is None:
            reason = f"page type {task.page_type!r} is not defined in the dataset spec"
            return _failure(ErrorClass.SELECTOR, reason)
        if task.archived:
            archived = await self._from_archive(task, page_spec)
            if archived is not None:
                return archived
        try:
            self._check_url(task.url)
        except BlockedURL as exc:
            return _failure(ErrorClass.BLOCKED, exc.detail)
        refusal = await self.robots_refusal(task)
        if refusal is not None:
            return refusal
        if robots.keeps_crawl_delay(task.spec):
            try:
                await self.robots.pace(task.url)
            except TurnDeferred as exc:  # the host's shared turn is far: defer, not sleep
                return deferral(exc)
        chromium = shared(self.executable)
        browser = await chromium.browser()
        proxy = GuardedProxy(self.guard)
        await proxy.start()
        context = None
        try:
            async with asyncio.timeout(self.deadline):
                context = await browser.new_context(
                    proxy={"server": proxy.url},
                    viewport=self.viewport,
                    user_agent=self.user_agent,
                    service_workers="block",
                    accept_downloads=False,
                )
                outcome = await self._render(task, page_spec, context, proxy)
        except TimeoutError:
            outcome = _failure(
                ErrorClass.NETWORK, f"total deadline of {self.deadline:g}s exceeded at {task.url}"
            )
        except _PlaywrightError as exc:
            outcome = self._browser_failure(exc, browser)
        finally:
            if context is not None and not await _close(context):
                # The browser stopped answering: relaunch it for the next task.
                log.warning("browser did not close a context within %ss: restarting", CLOSE_TIMEOUT)
                await chromium.restart()
            await proxy.close()
        if proxy.refused:
            outcome.artefact = dict(outcome.artefact or {})
            outcome.artefact["refused"] = [
                f"{r.method} {r.target}: {r.reason}" for r in proxy.refused[:20]
            ]
        return outcome

    def _check_url(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https"):
            raise BlockedURL(f"scheme {parts.scheme or '(none)'!r} is not http or https")
        if not parts.hostname:
            raise BlockedURL(f"invalid URL {url!r}: no host")
        if parts.username is not None or parts.password is not None:
            raise BlockedURL("URL carries credentials (user@host): refused")
        self.guard.check_literal(parts.hostname, default_port(parts.scheme, parts.port))

    async def _render(self, task: TaskInput, page_spec: dict, context, proxy) -> Outcome:
        ms = self.deadline * 1000
        context.set_default_timeout(ms)
        context.set_default_navigation_timeout(ms)
        if self.block:
            await context.route("**/*", self._blocker)
        page = await context.new_page()
        documents: list[str] = []
        page.on(
            "request",
            lambda r: (
                documents.append(r.url)
                if r.is_navigation_request() and r.frame == page.main_frame
                else None
            ),
        )
        response = None
        try:
            wait = "domcontentloaded" if self.wait_for else self.wait
            response = await page.goto(task.url, wait_until=wait)
        except _PlaywrightError as exc:
            refused = _document_refusal(proxy, documents or [task.url])
            if refused:
                return _failure(ErrorClass.BLOCKED, refused)
            return _navigation_failure(exc, task.url)
        refused = _document_refusal(proxy, documents or [task.url])
        if refused:
            return _failure(ErrorClass.BLOCKED, refused, status=response and response.status)
        if response is None:
            return _failure(ErrorClass.NETWORK, f"no response for {task.url}")
        headers = httpx.Headers(await response.all_headers())
        status = response.status
        error_class = classify_status(status)
        if error_class is not None:
            outcome = _failure(error_class, f"HTTP {status}", status=status, headers=headers)
            if status in (429, 503) and headers.get("retry-after"):
                from datetime import UTC, datetime

                outcome.retry_after = failures.parse_retry_after(
                    headers["retry-after"], datetime.now(UTC)
                )
            # A 401/403 is retried like the direct provider's, with its default bounds.
            return auth_verdict(outcome, task.attempt_count)
        if self.wait_for:
            # If it never appears, the page-state checks below say what the page is instead.
            with contextlib.suppress(_PlaywrightTimeout):
                await page.wait_for_selector(self.wait_for, timeout=self.wait_timeout * 1000)
        await self._steps(page)
        html = await page.content()
        size = len(html.encode("utf-8"))
        if size > self.max_bytes:
            reason = f"rendered page of {size} bytes is over the {self.max_bytes}-byte cap"
            return _failure(ErrorClass.TOO_LARGE, reason, status=status, headers=headers)
        final = Page(url=page.url, status=status, headers=headers, body=b"")
        # Archived before its checks run, so a page they reject can be re-extracted later.
        kept = await DirectProvider.archive(_as_stored(final, html))
        outcome = self._checked(task, page_spec, final, html)
        if not outcome.ok:
            await self._keep_artefacts(page, html, outcome)
        if kept is not None:
            outcome.artefact = {**(outcome.artefact or {}), "archive": kept}
        return outcome

    def _checked(self, task: TaskInput, page_spec: dict, final: Page, html: str) -> Outcome:
        """Page-state checks, extraction and discovery of rendered HTML (live or archived)."""
        view = PageView(LexborHTMLParser(html))
        try:
            check_page(view, page_spec)
            return self.extract(task, final, view, page_spec)
        except PageCheckFailure as exc:
            error_class, reason = exc.error_class, exc.reason
        except extraction.ExtractionError as exc:
            error_class, reason = ErrorClass.SELECTOR, str(exc)
        return _failure(error_class, reason, status=final.status, headers=final.headers, html=html)

    async def _from_archive(self, task: TaskInput, page_spec: dict) -> Outcome | None:
        """A "from the archive" batch: the rendered HTML the page's last render stored, checked
        and extracted again by the current spec, with no browser and no request (no robots.txt,
        no host turn). None when the blob is gone or expired: the page is rendered again."""
        try:
            stored = await asyncio.to_thread(archive_store.get, task.archived)
        except archive_store.ArchiveMissing as exc:
            log.info("task %s: %s; rendering it", task.task_id, exc)
            return None
        final = Page(
            url=stored.url, status=stored.status, headers=httpx.Headers(stored.headers), body=b""
        )
        outcome = self._checked(task, page_spec, final, stored.body.decode("utf-8", "replace"))
        archived = {"sha256": task.archived, "source": "archive"}
        outcome.artefact = {**(outcome.artefact or {}), "archive": archived}
        return outcome

    async def _blocker(self, route) -> None:
        if route.request.resource_type in self.block:
            await route.abort("blockedbyclient")
        else:
            await route.continue_()

    async def _steps(self, page) -> None:
        """Bounded scrolling and "load more" clicks: each step waits for the page to grow
        (up to `step_timeout`), and the loop stops when nothing changes."""
        timeout = self.step_timeout * 1000
        for _ in range(self.scroll_steps):
            height = await page.evaluate("document.body ? document.body.scrollHeight : 0")
            await page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
            try:
                await page.wait_for_function(
                    "h => document.body.scrollHeight > h", arg=height, timeout=timeout
                )
            except _PlaywrightTimeout:
                break
        if not self.load_more:
            return
        for _ in range(self.max_steps):
            button = page.locator(self.load_more).first
            if not await button.count() or not await button.is_visible():
                break
            nodes = await page.evaluate("document.getElementsByTagName('*').length")
            await button.click(timeout=timeout)
            try:
                await page.wait_for_function(
                    "n => document.getElementsByTagName('*').length != n",
                    arg=nodes,
                    timeout=timeout,
                )
            except _PlaywrightTimeout:
                break

    async def _keep_artefacts(self, page, html: str, outcome: Outcome) -> None:
        """Screenshot (PNG, capped) and rendered HTML of a page that failed its checks."""
        assert outcome.artefact is not None
        try:
            png = await page.screenshot(type="png", full_page=False, animations="disabled")
            if len(png) > self.screenshot_max_bytes:
                # Half the viewport is usually enough to see what went wrong.
                clip = {"x": 0, "y": 0, **self.viewport}
                clip["height"] = clip["height"] // 2
                png = await page.screenshot(type="png", clip=clip, animations="disabled")
            if len(png) <= self.screenshot_max_bytes:
                outcome.artefact["screenshot"] = await asyncio.to_thread(
                    artefacts.store, png, "png"
                )
            else:
                outcome.artefact["screenshot_skipped"] = (
                    f"{len(png)} bytes, over the {self.screenshot_max_bytes}-byte cap"
                )
        except _PlaywrightError as exc:
            outcome.artefact["screenshot_skipped"] = str(exc)[:200]
        body = redact(html).encode("utf-8")[: self.max_bytes]
        outcome.artefact["rendered_html"] = await asyncio.to_thread(artefacts.store, body, "html")

    def _browser_failure(self, exc: Exception, browser) -> Outcome:
        text = str(exc)
        if not browser.is_connected() or "closed" in text or "crash" in text.lower():
            return _failure(ErrorClass.NETWORK, f"browser crashed or closed: {text[:300]}")
        return _failure(ErrorClass.INTERNAL, f"browser error: {text[:300]}")


try:
    # The same classes playwright.async_api exports, from the module that defines them:
    # async_api itself costs every worker ~60 ms of start-up, browser or not.
    from playwright._impl._errors import Error as _PlaywrightError
    from playwright._impl._errors import TimeoutError as _PlaywrightTimeout
except ImportError:  # the optional extra is missing: the provider says so when it is used

    class _PlaywrightError(Exception):  # type: ignore[no-redef]
        pass

    class _PlaywrightTimeout(_PlaywrightError):  # type: ignore[no-redef]
        pass


async def _close(context) -> bool:
    try:
        await asyncio.wait_for(context.close(), CLOSE_TIMEOUT)
        return True
    except TimeoutError:
        return False
    except Exception:  # closed already (the browser crashed): nothing left to close
        return True


def _document_refusal(proxy: GuardedProxy, documents: list[str]) -> str:
    """The proxy's reason when it refused the page itself (or a redirect hop to it)."""
    wanted = set()
    for url in documents:
        parts = urlsplit(url)
        wanted.add(url.split("#", 1)[0])
        if parts.scheme == "https" and parts.hostname:
            wanted.add(f"{parts.hostname}:{parts.port or 443}")
    for refusal in proxy.refused:
        if refusal.target in wanted:
            return f"{refusal.target}: {refusal.reason}"
    return ""


def _navigation_failure(exc: Exception, url: str) -> Outcome:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, _PlaywrightTimeout):
        return _failure(ErrorClass.NETWORK, f"timeout: navigation to {url}: {text}")
    if "ERR_TOO_MANY_REDIRECTS" in text:
        return _failure(ErrorClass.REDIRECTS, text)
    if "closed" in text or "crash" in text.lower():
        return _failure(ErrorClass.NETWORK, f"browser crashed or closed: {text}")
    if "net::ERR_" in text:
        return _failure(ErrorClass.NETWORK, text)
    return _failure(ErrorClass.INTERNAL, f"navigation failed: {text}")


def _as_stored(final: Page, html: str) -> Page:
    """The rendered page as the archive keeps it: the serialised DOM, UTF-8 (whatever charset
    the response declared), so a re-extraction reads exactly what the checks read."""
    headers = httpx.Headers(final.headers)
    headers["content-type"] = "text/html; charset=utf-8"
    return Page(url=final.url, status=final.status, headers=headers, body=html.encode("utf-8"))


def _failure(
    error_class: ErrorClass,
    reason: str,
    *,
    status: int | None = None,
    headers: httpx.Headers | None = None,
    html: str | None = None,
) -> Outcome:
    artefact: dict[str, Any] = {"reason": redact(reason)}
    if status is not None:
        artefact["status"] = status
    if headers is not None:
        artefact["headers"] = {k: redact(v) for k, v in headers.items()}
        artefact["content_type"] = headers.get("content-type", "")
    if html is not None:
        artefact["body_excerpt"] = redact(html[:BODY_EXCERPT_BYTES])
    return Outcome(
        http_status=status,
        error_class=error_class,
        error_detail=redact(reason),
        artefact=failures.sanitise_artefact(artefact),
    )
