"""What the sites told us, kept where every worker sees it: each host's shared politeness slot,
each run's robots.txt per origin, and the item count each listing states.

- `HostSlot`: one row per host that asks for spacing (a Crawl-delay, a `min_delay`, a 429's
  slow-down). Every worker on every machine takes its turn at the host from this row
  (recovery.fetch.hostslots), so two workers do not halve the spacing.
- `HostSeat`: one row per (host, seat) for a host whose spec sets `per_host`: a request in
  flight holds one seat until it answers or its `held_until` passes (recovery.fetch.hostseats),
  so N workers together keep to the host's concurrency one worker would.
- `RobotsState`: one row per (run, origin) whose robots.txt a worker tried to read: when, what
  it answered, the rules (one read serves every worker) and their digest, and while it is
  unreachable the back-off shared by every worker (recovery.fetch.robots_state). The run
  page's robots.txt table.
- `ListingTotal`: one row per (run, listing walk) whose pages state a total (`cursor.total`):
  the total stated and the items the walk found (recovery.fetch.listing_totals); a shortfall
  flags the run and fails an `inventory_shortfall` rule (recovery.quality.shortfall).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from recovery.models.runs import Run


class HostSlot(models.Model):
    """A host's politeness budget shared by every worker (recovery.fetch.hostslots).

    Instants are seconds since the epoch by the database clock, as floats: one arithmetic on
    PostgreSQL and SQLite, and no worker's clock involved. Taken by one UPDATE ... RETURNING.
    """

    host = models.CharField(max_length=300, primary_key=True)  # netloc, lower case
    next_free = models.FloatField(default=0.0)  # the next instant a request may start
    tail = models.FloatField(default=0.0)  # where the last deferred page was sent
    # The answer of the statement that last took the row (RETURNING gives the new row only).
    last_start = models.FloatField(default=0.0)
    last_granted = models.BooleanField(default=False)
    spacing = models.FloatField(default=0.0)  # seconds between requests at the last take

    def __str__(self) -> str:
        return f"{self.host} (spacing {self.spacing:g}s)"


class HostSeat(models.Model):
    """One of a host's concurrent places, shared by every worker (recovery.fetch.hostseats).

    Free when `held_until` (seconds since the epoch, by the database clock) has passed: a
    release sets it to 0, and a worker that died holding the seat loses it at that instant.
    `holder` is the taker's token, so a late release cannot free a seat another request took
    over after it expired.
    """

    host = models.CharField(max_length=300)  # netloc, lower case, as HostSlot
    seat = models.PositiveIntegerField()  # 0 .. per_host - 1: a taker only uses seats < its cap
    holder = models.CharField(max_length=32, blank=True, default="")
    held_until = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            # The take's lookup (host, seat < cap, lowest first) and the rows made on first use
            # (INSERT ... ON CONFLICT DO NOTHING).
            models.UniqueConstraint(fields=["host", "seat"], name="hostseat_host_seat_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.host} seat {self.seat}"


class RobotsState(models.Model):
    """The last answer of an origin's robots.txt for one run (recovery.fetch.robots_state)."""

    class State(models.TextChoices):
        READING = "reading"  # the first read is under way
        RULES = "rules"  # 2xx: the rules apply
        UNAVAILABLE = "unavailable"  # 4xx, too many redirects: everything allowed
        UNREACHABLE = "unreachable"  # 5xx, 429, network: nothing yet, retried after back-off
        GIVEN_UP = "given_up"  # unreachable past SALVAGE_ROBOTS_UNREACHABLE_LIMIT

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="robots_states", db_index=False
    )
    origin = models.CharField(max_length=300)  # scheme://host[:port]
    state = models.CharField(max_length=16, choices=State.choices)
    status = models.PositiveSmallIntegerField(null=True, blank=True)  # None: no answer
    digest = models.CharField(max_length=16, blank=True)  # sha256 prefix of the rules read
    crawl_delay = models.FloatField(null=True, blank=True)
    fetched_at = models.DateTimeField(default=timezone.now)  # the last read, answered or not
    failures = models.PositiveIntegerField(default=0)  # consecutive unreachable reads
    failing_since = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)  # no read before this (back-off)
    # A worker is reading it until then: the others wait for its answer instead of asking too.
    reading_until = models.DateTimeField(null=True, blank=True)
    # The rules as read (up to robots_state.MAX_SHARED bytes), so one read serves every worker
    # of the run; empty when larger (each worker then reads it itself) or not 2xx.
    body = models.TextField(blank=True)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            # One row per (run, origin); the index also serves the run page's table.
            models.UniqueConstraint(fields=["run", "origin"], name="robotsstate_run_origin_uq")
        ]

    def __str__(self) -> str:
        return f"{self.origin}/robots.txt [{self.state}]"


class ListingTotal(models.Model):
    """A listing walk's stated total against the items it found (recovery.fetch.listing_totals)."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="listing_totals", db_index=False
    )
    listing_key = models.CharField(max_length=64)  # sha256 of the walk's first URL
    url = models.TextField()  # the walk's first page
    page_type = models.CharField(max_length=64)
    stated = models.PositiveIntegerField()  # the total the listing showed last
    found = models.PositiveIntegerField()  # items the walk (and its head re-read) listed
    checked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One row per walk; the index also serves the run's shortfall sum.
            models.UniqueConstraint(fields=["run", "listing_key"], name="listingtotal_run_key_uq")
        ]

    def __str__(self) -> str:
        return f"{self.url}: states {self.stated}, found {self.found}"

    @property
    def missing(self) -> int:
        return max(self.stated - self.found, 0)
