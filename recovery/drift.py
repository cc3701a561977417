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
re-read found (the run page's "inventory drift", recovery.figures.inventory_drift).
MAX_HEAD_READS bounds the re-reads of a listing that never stops growing.
"""

from __future__ import annotations

import logging
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from recovery import extraction
from recovery.http import Fetcher, FetchError
from recovery.providers.base import Discovered

log = logging.getLogger(__name__)

MAX_HEAD_READS = 50
TOTAL_KEY = "listing_total"  # navigation: the total the walk's first page showed


async def recheck_head(
    fetcher: Fetcher,
    url: str,
    page_spec: dict[str, Any],
    *,
    offset_param: str,
    start_total: int | None,
    max_links: int,
) -> list[str]:
    """Item URLs on the listing's head, read until no unseen item can remain (see above)."""
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
            if tree is None:
                return list(found)
            items = extraction.extract_links(tree, links, url, limit=max_links)
            found.update(dict.fromkeys(items))
            total = extraction.listing_total(tree, total_spec)
            if total is None or covered is None:
                return list(found)  # nothing says how many appeared: one head read
            if first_total is None:
                first_total = total
            # Reading forward never skips an older item (arrivals push them further on).
            if not items or offset + len(items) >= total - covered:
                break
            offset += len(items)
        if total == first_total:
            return list(found)  # nothing arrived during this pass: every item is seen
        covered = first_total  # only what arrived after this pass's first read is unseen
    log.warning("listing %s still growing after %d head reads", url, reads)
    return list(found)


async def _read(fetcher: Fetcher, url: str) -> LexborHTMLParser | None:
    try:
        page = await fetcher.fetch(url)
        if not 200 <= page.status < 300:
            log.warning("head re-read of %s: HTTP %s", url, page.status)
            return None
        text, _encoding, _lossy = page.text()
    except FetchError as exc:
        # The walk's own pages are committed; a failed re-read loses only the check, and says so.
        log.warning("head re-read of %s failed: %s", url, exc.detail)
        return None
    return LexborHTMLParser(text)


def drift_children(urls: list[str], page_type: str, partition_for) -> list[Discovered]:
    return [
        Discovered(url=u, page_type=page_type, partition=partition_for(u), discovery="drift")
        for u in urls
    ]
