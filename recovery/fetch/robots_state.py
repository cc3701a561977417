"""Each run's robots.txt per origin, shared by every worker: who reads it, what it said, and its
back-off while it cannot be read.

In (on the worker's main thread, through recovery.fetch.servant): `claim(run_id, origin)`
before reading an origin's robots.txt, `record(run_id, origin, answer, host)` after. Out: a
`Shared` snapshot of the RobotsState row: read it yourself now (`read`: you hold the reading
lease), or use the rules another worker read, or wait for the one reading it, or wait out the
back-off of an unreachable robots.txt.

Why in the database: each worker kept its own copy and its own memory of a failure (30 s),
so N workers asked a failing host N times, and a page deferred by one worker was fetched by
another that had not seen the failure. Now one read serves the run: the first worker to claim
an origin reads it, the others wait for its answer (and its rules, stored when at most
MAX_SHARED bytes) or for its back-off. The row is also what the run page shows.

Back-off of an unreachable robots.txt (5xx, 429, network), its own and not the pages':
`backoff(n)` = min(cap, base * 2^(n-1)) seconds after the n-th failure in a row, at least the
server's Retry-After (capped by SALVAGE_RETRY_AFTER_CAP); SALVAGE_ROBOTS_RETRY_BASE and _CAP.
Past SALVAGE_ROBOTS_UNREACHABLE_LIMIT (24 h) of failures in a row the state is `given_up`:
the origin's pages end as robots_unreachable when they come back (RFC 9309 2.3.1.3: complete
disallow while unreachable; a long bound, not forever). A success clears all of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

ROBOTS_LIFETIME = 3600.0  # seconds a read robots.txt is used within one run
MAX_SHARED = 64 * 1024  # bytes of rules stored for the other workers; larger: each reads it
EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()[:16]


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


def backoff(failures: int, retry_after: float | None = None) -> float:
    """Seconds until an unreachable robots.txt is read again after `failures` in a row."""
    base = float(settings.SALVAGE_ROBOTS_RETRY_BASE)
    cap = float(settings.SALVAGE_ROBOTS_RETRY_CAP)
    n = max(failures, 1)
    wait = cap if n > 62 else min(cap, base * 2 ** (n - 1))
    if retry_after is not None and retry_after > 0:
        wait = max(wait, min(retry_after, float(settings.SALVAGE_RETRY_AFTER_CAP)))
    return wait


@dataclass(frozen=True, slots=True)
class Answer:
    """What one read of robots.txt said. `state` is a RobotsState.State value, or "" for a
    local failure (refused by outbound safety, over the size cap): nothing to share."""

    state: str
    status: int | None = None
    body: bytes | None = None  # 2xx only
    crawl_delay: float | None = None
    retry_after: float | None = None  # a 429's or 503's Retry-After, seconds
    detail: str = ""
    error_class: str = ""  # a local failure's class (its pages keep it)


@dataclass(frozen=True, slots=True)
class Shared:
    """The row as one worker needs it (times in seconds from now)."""

    read: bool  # this worker holds the reading lease: read it and record the answer
    state: str = ""
    body: str | None = None  # the rules, when stored
    fresh_for: float = 0.0  # how long the rules or the "unavailable" stay good
    reading_for: float = 0.0  # another worker reads it, for at most this long
    retry_in: float = 0.0  # unreachable: no read before this
    failures: int = 0
    failing_for: float = 0.0
    detail: str = ""

    @property
    def given_up(self) -> bool:
        from recovery.models import RobotsState

        return self.state == RobotsState.State.GIVEN_UP


def _seconds(later: datetime | None, now: datetime) -> float:
    return max((later - now).total_seconds(), 0.0) if later is not None else 0.0


def _snapshot(row, now: datetime, read: bool) -> Shared:
    stored = bool(row.body) or row.digest == EMPTY_DIGEST
    return Shared(
        read=read,
        state=row.state,
        body=row.body if stored and row.state == row.State.RULES else None,
        fresh_for=max(ROBOTS_LIFETIME - (now - row.fetched_at).total_seconds(), 0.0),
        reading_for=_seconds(row.reading_until, now),
        retry_in=_seconds(row.retry_at, now),
        failures=row.failures,
        failing_for=(now - row.failing_since).total_seconds() if row.failing_since else 0.0,
        detail=row.detail,
    )


def claim(run_id: int, origin: str, lease: float) -> Shared:
    """May this worker read the origin's robots.txt now? If not, what the row says."""
    from recovery.models import RobotsState

    State = RobotsState.State
    now = timezone.now()
    until = now + timedelta(seconds=lease)
    with transaction.atomic():
        row = RobotsState.objects.select_for_update().filter(run_id=run_id, origin=origin).first()
        if row is None:
            try:
                with transaction.atomic():  # a savepoint: another worker may create it first
                    row = RobotsState.objects.create(
                        run_id=run_id,
                        origin=origin,
                        state=State.READING,
                        fetched_at=now,
                        reading_until=until,
                    )
                return _snapshot(row, now, read=True)
            except IntegrityError:
                row = RobotsState.objects.select_for_update().get(run_id=run_id, origin=origin)
        snap = _snapshot(row, now, read=False)
        if snap.retry_in > 0 or snap.reading_for > 0:
            return snap  # in back-off, or another worker is reading it
        if snap.fresh_for > 0 and (
            row.state == State.UNAVAILABLE or (row.state == State.RULES and snap.body is not None)
        ):
            return snap  # read already, and shared
        RobotsState.objects.filter(pk=row.pk).update(reading_until=until)
        return _snapshot(row, now, read=True)


def record(run_id: int, origin: str, answer: Answer, host: str) -> Shared:
    """Store what this worker's read said (it held the lease); returns the row as stored.

    A Crawl-delay also counts the read itself as the host's last turn (hostslots.note_now):
    robots.txt was asked for before its spacing was known."""
    from recovery.fetch import hostslots
    from recovery.models import RobotsState

    State = RobotsState.State
    now = timezone.now()
    with transaction.atomic():
        row, _ = RobotsState.objects.select_for_update().get_or_create(
            run_id=run_id, origin=origin, defaults={"state": State.READING, "fetched_at": now}
        )
        row.reading_until = None
        if answer.state == "":  # a local failure: its pages say why; nothing to share
            row.detail = answer.detail[:300]
            row.save(update_fields=["reading_until", "detail"])
            return _snapshot(row, now, read=False)
        row.fetched_at = now
        row.status = answer.status
        row.detail = answer.detail[:300]
        if answer.state in (State.RULES, State.UNAVAILABLE):
            body = answer.body or b""
            row.state = answer.state
            row.digest = digest(body) if answer.state == State.RULES else ""
            row.body = (
                body.decode("utf-8", "replace")
                if answer.state == State.RULES and len(body) <= MAX_SHARED
                else ""
            )
            row.crawl_delay = answer.crawl_delay
            row.failures, row.failing_since, row.retry_at = 0, None, None
        else:
            row.failures += 1
            row.failing_since = row.failing_since or now
            row.retry_at = now + timedelta(seconds=backoff(row.failures, answer.retry_after))
            failing = (now - row.failing_since).total_seconds()
            limit = float(settings.SALVAGE_ROBOTS_UNREACHABLE_LIMIT)
            row.state = State.GIVEN_UP if failing >= limit else State.UNREACHABLE
        row.save()
        if answer.crawl_delay and answer.crawl_delay > 0 and settings.SALVAGE_SHARED_POLITENESS:
            hostslots.note_now(host, answer.crawl_delay)
        return _snapshot(row, now, read=False)


@dataclass(frozen=True, slots=True)
class OriginRow:
    """One line of the run page's robots.txt table."""

    origin: str
    state: str
    status: int | None
    digest: str
    crawl_delay: float | None
    fetched_at: datetime
    failures: int
    failing_since: datetime | None
    retry_at: datetime | None
    detail: str


def for_run(run_id: int, limit: int = 20) -> tuple[list[OriginRow], int]:
    """The run's origins, those in trouble first (then by origin), at most `limit`; and how
    many there are (the unique (run, origin) index serves both)."""
    from django.db.models import Case, IntegerField, Value, When

    from recovery.models import RobotsState

    State = RobotsState.State
    rows = (
        RobotsState.objects.filter(run_id=run_id)
        .annotate(
            trouble=Case(
                When(state__in=[State.GIVEN_UP, State.UNREACHABLE], then=Value(0)),
                default=Value(1),
                output_field=IntegerField(),
            )
        )
        .order_by("trouble", "origin")
        .values_list(
            "origin", "state", "status", "digest", "crawl_delay", "fetched_at", "failures",
            "failing_since", "retry_at", "detail",
        )[:limit]
    )  # fmt: skip
    return [OriginRow(*row) for row in rows], RobotsState.objects.filter(run_id=run_id).count()
