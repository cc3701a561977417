"""Offset walks validate their final inventory: re-read the listing's head after the walk.

An offset is navigation, not proof of coverage (seed 002): items added at the front of a
listing while it is walked shift everything back, so the walk sees some items twice and never
sees the new ones. When the last page of an offset walk has been read, the direct provider
re-reads the head (offset 0, then onwards) until it has read as many items as appeared since
the walk began (the page's own total, `cursor.total` in the spec, against the total the first
page showed). Items only arrive at the front, so reading forward never skips an older one; what
arrived after a pass's first read is read by the next pass, from the head, until a pass saw the
same total from its first read to its last. Without a total on the page, the head is read once.

The head's items become `Discovered(discovery="drift")`; the engine keys them like any other
link, so items the walk already has are not added again, and the tasks a run holds with
`discovery = "drift"` are exactly the items that appeared during the walk and only the head
re-read found (the run page's "inventory drift", recovery.quality.figures.inventory_drift).
MAX_HEAD_READS bounds the re-reads of a listing that never stops growing.

A head read that fails (a fetch error, a status other than 2xx) raises `HeadReadFailed`: the
walk's last page fails with the read's own class and is retried like any page (its children
are committed only with a head re-read that worked). The total the head showed last is
returned with the items: the listing's stated total (recovery.fetch.listing_totals).
"""

from __future__ import annotations

import logging
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from recovery.fetch import extraction
from recovery.fetch.errors import FetchError
from recovery.fetch.fetcher import Fetcher
from recovery.fetch.responses import Page
from recovery.outcomes import Discovered, ErrorClass

log = logging.getLogger(__name__)

MAX_HEAD_READS = 50
TOTAL_KEY = "listing_total"  # navigation: the total the walk's first page showed


class HeadReadFailed(Exception):
    """A read of the listing's head failed: `page` is the non-2xx answer, or `error_class` the
    fetch's own class when there was none."""

    def __init__(
        self,
        url: str,
        detail: str,
        *,
        page: Page | None = None,
        error_class: ErrorClass | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"head re-read of {url}: {detail}")
        self.url, self.detail, self.page = url, f"head re-read of {url}: {detail}", page
        self.error_class = error_class
        self.context = context or {}


async def recheck_head(
    fetcher: Fetcher,
    url: str,
    page_spec: dict[str, Any],
    *,
    offset_param: str,
    start_total: int | None,
    max_links: int,
) -> tuple[list[str], int | None]:
    """Item URLs on the listing's head, read until no unseen item can remain (see above), and
    the total the head showed last (None without a total)."""
    links = page_spec["links"]
    total_spec = page_spec["cursor"].get("total")
    found: dict[str, None] = {}
    # Every item but the newest (total - covered) is seen; items only ever arrive at the front.
    covered = start_total
    reads = 0
    while reads < MAX_HEAD_READS:
        offset, first_total, total = 0, None, None
        while reads < MAX_HEAD_READS:
            reads += 1
            tree = await _read(fetcher, extraction.with_offset(url, offset, offset_param))
            items = extraction.extract_links(tree, links, url, limit=max_links)
            found.update(dict.fromkeys(items))
            total = extraction.listing_total(tree, total_spec)
            if total is None or covered is None:
                return list(found), total  # nothing says how many appeared: one head read
            if first_total is None:
                first_total = total
            # Reading forward never skips an older item (arrivals push them further on).
            if not items or offset + len(items) >= total - covered:
                break
            offset += len(items)
        if total == first_total:
            return list(found), total  # nothing arrived during this pass: every item is seen
        covered = first_total  # only what arrived after this pass's first read is unseen
    log.warning("listing %s still growing after %d head reads", url, reads)
    return list(found), total


async def _read(fetcher: Fetcher, url: str) -> LexborHTMLParser:
    """One head page, or HeadReadFailed: the check is part of the walk's last page, so a read
    that fails fails that page, with the read's own class (retried like any page)."""
    try:
        page = await fetcher.fetch(url)
        if not 200 <= page.status < 300:
            raise HeadReadFailed(url, f"HTTP {page.status}", page=page)
        text, _encoding, _lossy = page.text()
    except FetchError as exc:
        raise HeadReadFailed(
            url, exc.detail, error_class=exc.error_class, context=exc.context
        ) from None
    return LexborHTMLParser(text)


def drift_children(urls: list[str], page_type: str, partition_for) -> list[Discovered]:
    return [
        Discovered(url=u, page_type=page_type, partition=partition_for(u), discovery="drift")
        for u in urls
    ]
