"""The transactional outbox: events written with the change they announce, delivered later.

Delivery states (recovery.states.delivery): unsent -> sending -> delivered; sending -> failed
(retry with backoff) or sending -> uncertain (the destination may have the write). Every claim
bumps `attempts`, which doubles as the fencing token: only the sender holding the current
attempt may record the result, so a sender whose lease expired cannot overwrite a newer one.

Destinations (SALVAGE_DESTINATION):
- unset or `file:///abs/dir`: a file drop. `<dir>/<event_id>.json` is written to a temporary
  file and renamed into place, so the file either exists whole or not at all; an existing file
  means "already delivered" (idempotent).
- `http(s)://host/path`: `PUT <base>/events/<event_id>` with `Idempotency-Key: <event_id>`;
  `GET <base>/events/<event_id>` answers whether the key arrived.

An event records its destination as a *label* without credentials (`public_label`: no user or
password, no query), since the URL may carry them (`https://user:pw@host/in?api_token=…`) and
secrets never reach the database or a page (guarantee 11). The configured URL is looked up by
that label when the event is sent; rows written before labels were public are shown through
`public_label` as well.

A send that fails before anything reached the destination (connection refused, 5xx) is
`failed`; one that may have reached it (timeout after sending, connection dropped mid-answer) is
`uncertain`, and the next attempt looks the key up before sending again (seed 002: "the
importer checks the stable key before repeating the write"). A sender that crashed mid-send
leaves `sending` with an expired lease; it is treated as uncertain too.

Delivery never reads or writes tasks: repeating it cannot trigger a collection (guarantee 8).
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from recovery import audit, faults
from recovery.delivery import media_ack
from recovery.models import OutboxEvent, RemoteJob, Run
from recovery.states.base import check_move
from recovery.states.choices import DeliveryState
from recovery.states.delivery import ALLOWED

UNSENT = DeliveryState.UNSENT
SENDING = DeliveryState.SENDING
DELIVERED = DeliveryState.DELIVERED
FAILED = DeliveryState.FAILED
UNCERTAIN = DeliveryState.UNCERTAIN

RETRYABLE = (UNSENT, FAILED, UNCERTAIN)


class DeliveryError(ValueError):
    """A delivery action that cannot be done (unknown event, already delivered, in flight)."""


class Uncertain(Exception):
    """The destination may or may not have stored the write."""


class Failed(Exception):
    """The destination certainly did not store the write."""


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


# --- destinations ---------------------------------------------------------------------------


class Destination(Protocol):
    label: str

    def send(self, event_id: str, body: bytes) -> str: ...

    def lookup(self, event_id: str) -> bool: ...


@dataclass
class FileDrop:
    directory: Path

    @property
    def label(self) -> str:
        return f"file://{self.directory}"

    def path(self, event_id: str) -> Path:
        return self.directory / f"{event_id}.json"

    def send(self, event_id: str, body: bytes) -> str:
        target = self.path(event_id)
        if target.exists():
            return "already present"
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{event_id}.", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)  # atomic: readers see the whole file or none
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return "written"

    def lookup(self, event_id: str) -> bool:
        return self.path(event_id).exists()


def public_label(url: str) -> str:
    """`url` without what may be a credential: user, password and the query are dropped.

    `https://user:pw@host:8443/in?api_token=x` -> `https://host:8443/in`; a `file://` label and
    anything unparsable are returned as they are, or as `[unparsable destination]`."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "[unparsable destination]"
    if parts.scheme not in ("http", "https"):
        return url
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


_URL_IN_TEXT = re.compile(r"(?i)https?://[^\s'\"<>]+")


def public_text(text: str) -> str:
    """`text` with each http(s) URL in it as a page may show it: no user, password or query
    (a manifest URL may carry its credentials, and a fetch error quotes the URL)."""

    def shown(match: re.Match) -> str:
        # Punctuation that ends a sentence ("<url>: HTTP 503") is text, not the URL's.
        url = match.group(0).rstrip(".,;:)]")
        return public_label(url) + match.group(0)[len(url) :]

    return _URL_IN_TEXT.sub(shown, text)


@dataclass
class HttpDestination:
    base_url: str
    timeout: float

    @property
    def label(self) -> str:
        return public_label(self.base_url)

    def _url(self, event_id: str) -> str:
        return f"{self.base_url.rstrip('/')}/events/{event_id}"

    def send(self, event_id: str, body: bytes) -> str:
        # The destination is configured by the operator, not named by a manifest, so it is not
        # subject to the target allow-list; it still gets a hard timeout.
        headers = {"Idempotency-Key": event_id, "Content-Type": "application/json"}
        try:
            with httpx.Client(timeout=self.timeout) as client:
                response = client.put(self._url(event_id), content=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise Failed(f"not sent: {type(exc).__name__}: {exc}") from None
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            # The request went out; whether the destination stored it is unknown.
            raise Uncertain(f"{type(exc).__name__} after sending: {exc}") from None
        if response.status_code >= 500:
            raise Failed(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise Failed(f"HTTP {response.status_code}: {response.text[:200]}")
        return f"HTTP {response.status_code}"

    def lookup(self, event_id: str) -> bool:
        try:
            with httpx.Client(timeout=self.timeout) as client:
                response = client.get(self._url(event_id))
        except httpx.HTTPError as exc:
            raise Uncertain(f"lookup failed: {type(exc).__name__}: {exc}") from None
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise Uncertain(f"lookup answered HTTP {response.status_code}")


def destination_for(label: str = "") -> Destination:
    """The destination named by `label` (an event's), else SALVAGE_DESTINATION, else the
    default file drop under the data directory."""
    configured = _setting("SALVAGE_DESTINATION", "")
    # An event's label is public: the configured URL (with its credentials) is the one it names.
    if not label or (configured and public_label(configured) == label):
        label = configured
    if not label:
        return FileDrop(Path(settings.DATA_DIR) / "outbox")
    shown = public_label(label)
    try:
        parts = urlsplit(label)
        hostname = parts.hostname
    except ValueError:
        raise DeliveryError(f"destination {shown!r} is not a valid URL") from None
    if parts.scheme == "file":
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise DeliveryError(f"destination {shown!r}: file:/// needs an absolute path")
        return FileDrop(Path(path))
    if parts.scheme in ("http", "https") and hostname:
        return HttpDestination(label, float(_setting("SALVAGE_DELIVERY_TIMEOUT", 10.0)))
    raise DeliveryError(f"destination {shown!r} is not file:///abs/dir or an http(s) URL")


# --- writing events --------------------------------------------------------------------------


def enqueue(run: Run | None, kind: str, payload: dict[str, Any]) -> OutboxEvent:
    """Write an event in the caller's transaction; a wake-up follows the COMMIT."""
    try:
        label = destination_for().label
    except DeliveryError:
        # A misconfigured destination must not block the acceptance: the event is kept and
        # its delivery fails with the reason until the setting is fixed.
        label = public_label(_setting("SALVAGE_DESTINATION", ""))
    event = OutboxEvent.objects.create(run=run, event_type=kind, payload=payload, destination=label)
    transaction.on_commit(lambda: wake(event.pk))
    return event


def wake(event_id: Any = None) -> None:
    """Ask a django-q2 worker to deliver now. Best effort: `deliver_due` finds it anyway."""
    if not _setting("SALVAGE_OUTBOX_WAKE", True):
        return
    try:
        from django_q.tasks import async_task

        async_task("recovery.tasks.deliver_due", q_options={"group": "outbox"})
    except Exception:  # a broker hiccup must not fail the accepted change; the sweep retries
        return


def document(event: OutboxEvent) -> bytes:
    """The body sent for an event (the same bytes on every attempt)."""
    run = event.run
    doc: dict[str, Any] = {
        "event_id": str(event.pk),
        "event_type": event.event_type,
        "run": event.run_id,
        "dataset": run.dataset.name if run else None,
        "window": run.window if run else None,
        "created_at": event.created_at.isoformat(),
        "payload": event.payload,
    }
    if event.event_type == OutboxEvent.Kind.MEDIA_HANDOFF:
        # How the consumer says it finished with the result: its token is signed at send time
        # and never stored (recovery.delivery.media_ack).
        job_pk = (event.payload or {}).get("remote_job")
        job = RemoteJob.objects.filter(pk=job_pk).first() if job_pk is not None else None
        if job is not None:
            doc["acknowledge"] = media_ack.block(job.pk, job.attempt_id)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


# --- delivering ------------------------------------------------------------------------------


def backoff_seconds(attempts: int) -> float:
    """Full jitter: random(0, min(cap, base * 2^attempts))."""
    base = float(_setting("SALVAGE_DELIVERY_BACKOFF_BASE", 2.0))
    cap = float(_setting("SALVAGE_DELIVERY_BACKOFF_CAP", 600.0))
    return random.uniform(0, min(cap, base * 2 ** max(0, attempts - 1)))


def _due_filter(now):
    return Q(state__in=RETRYABLE, next_attempt_at__lte=now) | Q(state=SENDING, lease_until__lt=now)


def has_due(now=None) -> bool:
    return OutboxEvent.objects.filter(_due_filter(now or timezone.now())).exists()


def _claim(pk, source: str, attempts: int, now) -> bool:
    """source -> sending, fenced on the attempt counter; True if this caller won."""
    check_move("delivery", ALLOWED, [source], SENDING)
    lease = int(_setting("SALVAGE_DELIVERY_LEASE_SECONDS", 60))
    filters: dict[str, Any] = {"pk": pk, "state": source, "attempts": attempts}
    if source == SENDING:
        filters["lease_until__lt"] = now
    return bool(
        OutboxEvent.objects.filter(**filters).update(
            state=SENDING, attempts=attempts + 1, lease_until=now + timedelta(seconds=lease)
        )
    )


def _finish(pk, attempt: int, target: str, **fields) -> bool:
    """sending -> target, only for the sender holding `attempt` (fencing)."""
    check_move("delivery", ALLOWED, [SENDING], target)
    return bool(
        OutboxEvent.objects.filter(pk=pk, state=SENDING, attempts=attempt).update(
            state=target, lease_until=None, **fields
        )
    )


def deliver_one(event_id: Any, *, now=None) -> str:
    """Claim one due event and deliver it. Returns the resulting state, or "" if not claimed."""
    now = now or timezone.now()
    event = OutboxEvent.objects.select_related("run__dataset").filter(pk=event_id).first()
    if event is None:
        return ""
    source, attempts = event.state, event.attempts
    if source == SENDING and not (event.lease_until and event.lease_until < now):
        return ""
    if source == DELIVERED or not _claim(event.pk, source, attempts, now):
        return ""
    attempt = attempts + 1
    # A previous attempt may have reached the destination: ask before writing again.
    check_first = source in (UNCERTAIN, SENDING)
    try:
        destination = destination_for(event.destination)
        if check_first and destination.lookup(str(event.pk)):
            _finish(event.pk, attempt, DELIVERED, delivered_at=timezone.now(), last_error="")
            return DELIVERED
        destination.send(str(event.pk), document(event))
    except Uncertain as exc:
        delay = backoff_seconds(attempt)
        _finish(
            event.pk,
            attempt,
            UNCERTAIN,
            last_error=str(exc)[:2000],
            next_attempt_at=timezone.now() + timedelta(seconds=delay),
        )
        return UNCERTAIN
    except Exception as exc:  # Failed, DeliveryError, OSError: nothing stored
        delay = backoff_seconds(attempt)
        _finish(
            event.pk,
            attempt,
            FAILED,
            last_error=f"{type(exc).__name__}: {exc}"[:2000],
            next_attempt_at=timezone.now() + timedelta(seconds=delay),
        )
        return FAILED
    faults.point("outbox_after_send")  # crash tests: the write landed, "delivered" did not
    _finish(event.pk, attempt, DELIVERED, delivered_at=timezone.now(), last_error="")
    return DELIVERED


def deliver_due(limit: int = 50, *, now=None) -> int:
    """One step: deliver up to `limit` due events; returns how many were attempted."""
    now = now or timezone.now()
    ids = list(
        OutboxEvent.objects.filter(_due_filter(now))
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(1 for pk in ids if deliver_one(pk, now=now))


# --- operator actions (dashboard and commands) ----------------------------------------------


def _event_id(event_id: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(event_id))
    except ValueError:
        raise DeliveryError(f"event {event_id!r} is not a valid event id") from None


def _event(event_id: Any) -> OutboxEvent:
    pk = _event_id(event_id)
    event = OutboxEvent.objects.filter(pk=pk).first()
    if event is None:
        raise DeliveryError(f"event {event_id} does not exist")
    return event


def _make_due(event_id: Any, actor: str) -> OutboxEvent:
    """The retry itself, in the caller's transaction: due now, and its audit entry."""
    event = _event(event_id)
    if event.state == DELIVERED:
        raise DeliveryError(f"event {event.pk} was already delivered")
    now = timezone.now()
    if event.state == SENDING and event.lease_until and event.lease_until >= now:
        raise DeliveryError(f"event {event.pk} is being delivered right now")
    OutboxEvent.objects.filter(pk=event.pk, state=event.state).update(next_attempt_at=now)
    audit.record(actor, "retry_delivery", event, "", state=event.state)
    return event


def retry_delivery(event_id: Any, actor: str) -> OutboxEvent:
    """Make a failed, uncertain or unsent event due now (an uncertain one is looked up first)."""
    with transaction.atomic():
        event = _make_due(event_id, actor)
        transaction.on_commit(lambda: wake(event.pk))
    event.refresh_from_db()
    return event


# --- many at once (the Deliveries list's bulk action) ----------------------------------------

FAILING = (FAILED, UNCERTAIN)  # what "failing deliveries" means (the list, the attention page)
MAX_RETRIES = 500  # events one bulk retry makes due (each writes its own audit entry)


def failing_q() -> Q:
    """Failed or uncertain events: outbox_due_idx's leading column serves it."""
    return Q(state__in=FAILING)


def _retryable_q(now) -> Q:
    # What retry_delivery accepts: anything but delivered or a send whose lease still runs.
    return (
        Q(state__in=RETRYABLE)
        | Q(state=SENDING, lease_until__lt=now)
        | Q(state=SENDING, lease_until__isnull=True)
    )


def retryable(event_ids: list[Any] | None) -> list[OutboxEvent]:
    """The events a bulk retry of `event_ids` (None: every failing event) makes due, oldest
    first; at most MAX_RETRIES + 1, so a caller sees when there are too many."""
    now = timezone.now()
    if event_ids is None:
        events = OutboxEvent.objects.filter(failing_q())
    else:
        ids = [_event_id(value) for value in event_ids]
        if len(ids) > MAX_RETRIES:
            raise DeliveryError(f"select at most {MAX_RETRIES} deliveries, not {len(ids)}")
        events = OutboxEvent.objects.filter(_retryable_q(now), pk__in=ids)
    events = events.select_related("run__dataset").order_by("created_at", "pk")
    return list(events[: MAX_RETRIES + 1])


def retry_many(event_ids: list[Any] | None, actor: str, *, expected: int) -> int:
    """Retry each selected event (None: every failing one) as retry_delivery would, all or none,
    with one wake-up; returns how many. `expected` is the count the operator confirmed: when the
    selection now holds a different number of retryable events, nothing changes."""
    with transaction.atomic():
        events = retryable(event_ids)
        if len(events) > MAX_RETRIES:
            raise DeliveryError(
                f"more than {MAX_RETRIES} deliveries would be retried; retry them in parts "
                "(filter the list, then select)"
            )
        if not events:
            raise DeliveryError("none of the selected deliveries can be retried now")
        if len(events) != expected:
            raise DeliveryError(
                f"{len(events)} deliveries can be retried now, not the {expected} you confirmed; "
                "nothing was retried, review it again"
            )
        for event in events:
            _make_due(event.pk, actor)
        transaction.on_commit(wake)
    return len(events)


def lookup_delivery(event_id: Any, actor: str) -> dict[str, Any]:
    """Ask the destination whether the event arrived; if it did, record it as delivered."""
    event = _event(event_id)
    try:
        found = destination_for(event.destination).lookup(str(event.pk))
        error = ""
    except Uncertain as exc:
        found, error = None, str(exc)
    marked = False
    with transaction.atomic():
        event = _event(event_id)
        if found and event.state in RETRYABLE:
            now = timezone.now()
            if _claim(event.pk, event.state, event.attempts, now):
                marked = _finish(
                    event.pk, event.attempts + 1, DELIVERED, delivered_at=now, last_error=""
                )
        audit.record(actor, "lookup_delivery", event, "", found=found, marked=marked, error=error)
    event.refresh_from_db()
    return {"event": str(event.pk), "found": found, "state": event.state, "error": error}
