"""Web Scraper Cloud sitemaps (seed 002: "Build and validate the sitemap first").

A dataset's spec names its sitemap file (`provider_options.sitemap_file`, the JSON the Web
Scraper extension exports: `_id`, `startUrl`, `selectors`). `check` validates it here first
(the errors name the selector and the field), then `SitemapApi` puts it in the account through
the API, the way the scraping jobs are launched (recovery.providers.webscraper): POST
/api/v1/sitemap creates, PUT /api/v1/sitemap/{id} updates, GET /api/v1/sitemap/{id} reads back
(`sitemap` is the JSON as a string), GET /api/v1/sitemaps lists the account's (id, name), page
by page. The service validates again: a refusal is a `SitemapRefused` with the answer as an
`Exchange` (the lifecycle keeps it as an Incident). Nothing here touches the database.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx

from recovery.ops import logs
from recovery.providers.remote_base import Exchange, exchange_of

# The Web Scraper extension's rule for a sitemap name: a lower-case letter first, then lower-case
# letters, digits and _$()+-/ (the service refuses what the extension would not save).
NAME = re.compile(r"[a-z][a-z0-9_$()+\-/]{0,199}")
SELECTOR_ID = re.compile(r"[^\s]{1,200}")
MAX_FILE_BYTES = 1_000_000
MAX_SELECTORS = 1000
MAX_PAGES = 50  # of GET /api/v1/sitemaps, 100 sitemaps a page: a bound, not a limit in use


class SitemapInvalid(ValueError):
    """The sitemap file does not validate (the message names what and where)."""


class SitemapRefused(Exception):
    """The service refused the request (4xx): its answer is kept whole."""

    def __init__(self, detail: str, exchange: Exchange | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.exchange = exchange


class SitemapUnavailable(Exception):
    """The service could not be asked (network, 5xx): nothing is known to have changed."""


def load(data: bytes, name: str = "sitemap") -> dict[str, Any]:
    """Parse and check a sitemap file's bytes; returns the sitemap. SitemapInvalid otherwise."""
    if len(data) > MAX_FILE_BYTES:
        raise SitemapInvalid(f"{name}: over {MAX_FILE_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SitemapInvalid(f"{name}: not JSON ({exc})") from None
    return check(doc, name)


def check(doc: Any, name: str = "sitemap") -> dict[str, Any]:
    """The checks the extension and the service make, here first, naming the first problem."""
    if not isinstance(doc, dict):
        raise SitemapInvalid(f"{name}: a sitemap is a JSON object")
    sitemap_name = doc.get("_id")
    if not isinstance(sitemap_name, str) or not NAME.fullmatch(sitemap_name):
        raise SitemapInvalid(
            f"{name}: _id {sitemap_name!r} is not a sitemap name (a lower-case letter, then "
            "lower-case letters, digits or _$()+-/)"
        )
    starts = doc.get("startUrl")
    starts = [starts] if isinstance(starts, str) else starts
    if not isinstance(starts, list) or not starts:
        raise SitemapInvalid(f"{name}: startUrl needs at least one URL")
    for url in starts:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise SitemapInvalid(f"{name}: startUrl {url!r} is not an http(s) URL")
    selectors = doc.get("selectors")
    if not isinstance(selectors, list) or not selectors:
        raise SitemapInvalid(f"{name}: selectors needs at least one selector")
    if len(selectors) > MAX_SELECTORS:
        raise SitemapInvalid(f"{name}: more than {MAX_SELECTORS} selectors")
    ids: list[str] = []
    for i, selector in enumerate(selectors):
        if not isinstance(selector, dict):
            raise SitemapInvalid(f"{name}: selectors[{i}] is not an object")
        sid = selector.get("id")
        if not isinstance(sid, str) or not SELECTOR_ID.fullmatch(sid) or sid == "_root":
            raise SitemapInvalid(f"{name}: selectors[{i}].id {sid!r} is not a selector id")
        if sid in ids:
            raise SitemapInvalid(f"{name}: selector {sid!r} appears twice")
        kind = selector.get("type")
        if not isinstance(kind, str) or not kind.startswith("Selector"):
            raise SitemapInvalid(f"{name}: selector {sid!r}: type {kind!r} is not a selector type")
        ids.append(sid)
    parents_of: dict[str, list[str]] = {}
    for selector in selectors:
        sid = selector["id"]
        parents = selector.get("parentSelectors")
        if not isinstance(parents, list) or not parents:
            raise SitemapInvalid(f"{name}: selector {sid!r} needs parentSelectors")
        for parent in parents:
            if parent != "_root" and parent not in ids:
                raise SitemapInvalid(
                    f"{name}: selector {sid!r}: parent {parent!r} is neither _root nor a selector"
                )
        parents_of[sid] = list(parents)
    # Every selector must be reachable from _root: one whose parents only lead back to each
    # other would never run.
    reached = {"_root"}
    grew = True
    while grew:
        grew = False
        for sid, parents in parents_of.items():
            if sid not in reached and any(p in reached for p in parents):
                reached.add(sid)
                grew = True
    unreachable = [sid for sid in ids if sid not in reached]
    if unreachable:
        raise SitemapInvalid(f"{name}: selector {unreachable[0]!r} is not reachable from _root")
    return doc


def same(stored: str | dict[str, Any], doc: dict[str, Any]) -> bool:
    """Whether the account's copy (its JSON string, or parsed) is this sitemap."""
    try:
        theirs = json.loads(stored) if isinstance(stored, str) else stored
    except ValueError:
        return False
    return bool(theirs == doc)


class SitemapApi:
    """The sitemap calls of the Web Scraper Cloud API, on the provider's client and token."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, token: str, timeout: float):
        self._client = client
        self._base = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout

    async def _call(
        self, method: str, path: str, query: dict[str, Any] | None = None, **kwargs: Any
    ) -> httpx.Response:
        url = f"{self._base}{path}"
        # The token is a query parameter (the documented contract): every URL that is logged
        # or kept goes through logs.redact.
        params = {**(query or {}), "api_token": self._token}
        try:
            response = await asyncio.wait_for(
                self._client.request(method, url, params=params, **kwargs), self._timeout
            )
        except (TimeoutError, httpx.HTTPError) as exc:
            raise SitemapUnavailable(
                f"{type(exc).__name__} from {method} {logs.redact(url)}"
            ) from None
        if response.status_code >= 500:
            raise SitemapUnavailable(f"HTTP {response.status_code} from {method} {path}")
        if response.status_code >= 400:
            raise SitemapRefused(
                f"HTTP {response.status_code} from {method} {path}: {_errors(response)}",
                exchange_of(response),
            )
        return response

    @staticmethod
    def _data(response: httpx.Response) -> Any:
        try:
            return response.json()["data"]
        except (ValueError, KeyError, TypeError):
            raise SitemapUnavailable("an answer without data") from None

    async def listed(self) -> list[dict[str, Any]]:
        """The account's sitemaps, [{"id", "name"}], every page."""
        found: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            response = await self._call("GET", "/api/v1/sitemaps", {"page": page})
            rows = self._data(response)
            found += [r for r in rows if isinstance(r, dict)]
            try:
                last = int(response.json().get("last_page") or 1)
            except (TypeError, ValueError):
                last = 1
            if page >= last:
                break
        return found

    async def get(self, sitemap_id: int) -> dict[str, Any]:
        data = self._data(await self._call("GET", f"/api/v1/sitemap/{sitemap_id}"))
        if not isinstance(data, dict):
            raise SitemapUnavailable(f"sitemap {sitemap_id}: an answer without the sitemap")
        return data

    async def create(self, doc: dict[str, Any]) -> int:
        data = self._data(await self._call("POST", "/api/v1/sitemap", json=doc))
        try:
            return int(data["id"])
        except (KeyError, TypeError, ValueError):
            raise SitemapUnavailable("created, but the answer names no sitemap id") from None

    async def update(self, sitemap_id: int, doc: dict[str, Any]) -> None:
        await self._call("PUT", f"/api/v1/sitemap/{sitemap_id}", json=doc)


def _errors(response: httpx.Response) -> str:
    """The service's validation errors, in one line (redacted)."""
    try:
        body = response.json()
    except ValueError:
        return logs.redact(response.text[:300])
    problems = body.get("validationErrors") if isinstance(body, dict) else None
    if isinstance(problems, dict):
        return "; ".join(
            f"{field}: {' '.join(str(m) for m in messages)}"
            if isinstance(messages, list)
            else f"{field}: {messages}"
            for field, messages in problems.items()
        )[:1000]
    return logs.redact(json.dumps(body)[:300])
