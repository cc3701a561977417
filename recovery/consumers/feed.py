"""The change feed: accepted, published and correction events numbered in commit order.

A consumer that downloaded a dataset at version V asks for the changes since V and applies
them instead of downloading again (docs/api.md, "Syncing"). The events are the outbox's
(written in the transaction of the change they announce); this module only numbers them.

Why numbered here and not by the event's own id or time: two transactions can commit in the
other order than they started, so an id or timestamp taken inside the writing transaction may
become visible after a higher one, and a consumer that had read past it would never see it.
`sequence()` numbers events once they are committed, one sequencer at a time (PostgreSQL: an
advisory transaction lock; SQLite: the IMMEDIATE transaction holds the only write lock), so a
number is never given below one already given. It runs when the API reads the feed or a
dataset's version, and does nothing (one indexed read) when no event waits.

It looks for events from the newest event it numbered, less MARGIN (an hour): an event whose
transaction committed more than an hour after it was written would be missed. The engine's
transactions last seconds. The dataset's `version` is the highest number among its entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, Max, OuterRef, QuerySet

from recovery.consumers.models import FeedEntry
from recovery.delivery import exports
from recovery.models import Dataset, OutboxEvent, Run

KINDS = (
    OutboxEvent.Kind.ACCEPTED,
    OutboxEvent.Kind.PUBLISHED,
    OutboxEvent.Kind.CORRECTION,
)
MARGIN = timedelta(hours=1)
# pg_advisory_xact_lock key shared by every sequencer ("salvage feed").
_ADVISORY_KEY = 0x5A1F_EED


def _waiting() -> QuerySet[OutboxEvent]:
    newest = FeedEntry.objects.aggregate(newest=Max("event_created_at"))["newest"]
    events = OutboxEvent.objects.filter(event_type__in=KINDS, run__isnull=False)
    numbered = FeedEntry.objects.filter(event_id=OuterRef("pk"))
    if newest is not None:
        events = events.filter(created_at__gte=newest - MARGIN)
        # An entry keeps its event's created_at, so only entries from the same cutoff on can
        # match: the anti-join reads the last hour's entries (feed_event_created_idx), not
        # every entry ever numbered (bench/api.py, 2026-12-07: a hash of all 21,002 entries,
        # a sequential scan, on every API request that reads the feed or a version).
        numbered = numbered.filter(event_created_at__gte=newest - MARGIN)
    return events.filter(~Exists(numbered))


def sequence() -> int:
    """Number every committed feed event not yet numbered, oldest first; returns how many."""
    # In created_at order, not .exists() (which drops the order): expecting an early match
    # under LIMIT 1, the planner read the whole outbox sequentially; in this order it walks
    # outbox_created_idx from the cutoff, the last hour's events, when none waits (bench/api.py).
    if _waiting().order_by("created_at", "pk").values_list("pk", flat=True).first() is None:
        return 0
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_KEY])
        # Read again under the lock: another sequencer may have numbered them meanwhile
        # (each statement of a READ COMMITTED transaction sees what committed before it).
        waiting = list(
            _waiting()
            .order_by("created_at", "pk")
            .values_list("pk", "run_id", "run__dataset_id", "event_type", "created_at")
        )
        top = FeedEntry.objects.aggregate(top=Max("seq"))["top"] or 0
        FeedEntry.objects.bulk_create(
            FeedEntry(
                seq=top + i,
                event_id=pk,
                run_id=run_id,
                dataset_id=dataset_id,
                kind=kind,
                event_created_at=created_at,
            )
            for i, (pk, run_id, dataset_id, kind, created_at) in enumerate(waiting, start=1)
        )
    return len(waiting)


def version(dataset: Dataset) -> int:
    """The dataset's version: the number of its newest feed entry (0: none yet)."""
    return FeedEntry.objects.filter(dataset=dataset).aggregate(v=Max("seq"))["v"] or 0


@dataclass(frozen=True)
class Changes:
    since: int
    changes: list[dict[str, Any]]
    more: bool  # a page: ask again from `next_since`
    next_since: int
    version: int  # the dataset's version now
    current_run: int | None  # the dataset's current run now


def changes(dataset: Dataset, since: int, limit: int) -> Changes:
    """The dataset's feed entries after `since`, at most `limit`, oldest first.

    Each has its `version` (the entry's number), `kind`, `run` and `at`. A correction also
    carries the observation's keys, its new `observation_version` and its `row` as the
    exports and the rows pages show it now (null: the row is no longer exported, delete it);
    an accepted or published entry carries the event's summary (counts, partial marks)."""
    entries = list(
        FeedEntry.objects.filter(dataset=dataset, seq__gt=since)
        .select_related("event")
        .order_by("seq")[: limit + 1]
    )
    more = len(entries) > limit
    entries = entries[:limit]
    rows = _current_rows(entries)
    out = []
    for entry in entries:
        event = entry.event
        change: dict[str, Any] = {
            "version": entry.seq,
            "kind": entry.kind,
            "run": entry.run_id,
            "at": event.created_at.isoformat(),
        }
        if entry.kind == OutboxEvent.Kind.CORRECTION:
            key = str(event.payload.get("observation_key", ""))
            change.update(
                observation_key=key,
                entity_key=event.payload.get("entity_key"),
                observation_version=event.payload.get("version"),
                row=rows.get((entry.run_id, key)),
            )
        else:
            change["summary"] = event.payload
        out.append(change)
    current = exports.current_run(dataset.name)
    return Changes(
        since=since,
        changes=out,
        more=more,
        next_since=entries[-1].seq if entries else since,
        version=version(dataset),
        current_run=current.pk if current is not None else None,
    )


def _current_rows(entries: list[FeedEntry]) -> dict[tuple[int, str], dict[str, Any]]:
    """The corrected observations' rows as exported now, one read per run."""
    keys: dict[int, set[str]] = {}
    for entry in entries:
        if entry.kind == OutboxEvent.Kind.CORRECTION:
            key = str(entry.event.payload.get("observation_key", ""))
            keys.setdefault(entry.run_id, set()).add(key)
    found: dict[tuple[int, str], dict[str, Any]] = {}
    for run in Run.objects.filter(pk__in=keys).select_related("dataset"):
        for _, row in exports.row_objects(run, keys=sorted(keys[run.pk])):
            found[(run.pk, row["observation_key"])] = row
    return found
