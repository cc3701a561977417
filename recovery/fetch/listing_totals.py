"""A listing walk's stated total against the items it found: an inventory shortfall.

A listing that says "120 products" and lists 100 passed coverage 1.000 (issue 30): coverage
counts the tasks a run has, and the 20 missing items never became tasks. So a walk whose pages
show a total (`cursor.total` in the spec) counts what it lists:

- each page of the walk carries in its navigation the walk's first URL (`walk`) and how many
  item links the walk's pages before it listed (`listed`), set by the page before it
  (`DirectProvider.extract`, with the walk's other navigation);
- the walk's last page (no next page; after an offset walk's head re-read, recovery.fetch.
  drift) records one ListingTotal row: `stated`, the total the listing showed last (the head's,
  after a re-read), and `found`, the items listed by the walk's pages plus the head's items
  that no page of the run had listed (looked up by task key).

`found` counts an item twice when a shifting offset listing shows it on two pages, so it can
only overstate what was found: a shortfall it reports is real. The run page shows a shortfall
with both numbers, and a spec's `inventory_shortfall` rule fails the run on it
(recovery.quality.shortfall).

Recorded through the worker's main thread (recovery.fetch.servant) before the page's commit;
an upsert per (run, walk), so a retried or rerun last page records the walk again, with its
latest numbers. Outside a worker nothing is recorded.
"""

from __future__ import annotations

import hashlib
import logging

from recovery.fetch import servant
from recovery.keys import InvalidURL, canonical_url, task_key

log = logging.getLogger(__name__)

WALK_KEY = "walk"  # navigation: the walk's first URL
LISTED_KEY = "listed"  # navigation: item links the walk's earlier pages listed


def listing_key(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def record_now(
    run_id: int,
    walk: str,
    page_type: str,
    stated: int,
    listed: int,
    head_urls: list[str],
    key_of: tuple[str, str, str],
) -> int:
    """Upsert the walk's row (main thread); returns `found`. `key_of` is (dataset, window,
    item page type): the head's items are looked up as tasks by their task keys."""
    from django.utils import timezone

    from recovery.models import ListingTotal, Task

    dataset, window, item_type = key_of
    keys = set()
    for url in head_urls:
        try:
            keys.add(task_key(dataset, canonical_url(url), window, item_type))
        except InvalidURL:
            continue
    known = 0
    ordered = sorted(keys)
    for start in range(0, len(ordered), 500):
        known += Task.objects.filter(task_key__in=ordered[start : start + 500]).count()
    found = listed + len(keys) - known
    ListingTotal.objects.update_or_create(
        run_id=run_id,
        listing_key=listing_key(walk),
        defaults={
            "url": walk,
            "page_type": page_type,
            "stated": stated,
            "found": found,
            "checked_at": timezone.now(),
        },
    )
    return found


async def record(
    run_id: int,
    walk: str,
    page_type: str,
    stated: int,
    listed: int,
    head_urls: list[str],
    key_of: tuple[str, str, str],
) -> int | None:
    """record_now on the worker's main thread; None when nothing serves it (or it failed)."""
    try:
        return await servant.call(
            record_now, run_id, walk, page_type, stated, listed, head_urls, key_of
        )
    except servant.Unavailable:
        return None
    except Exception as exc:  # the count is a check on the walk, not the walk: say so and go on
        log.warning("listing %s: stated total not recorded (%s)", walk, exc)
        return None
