"""Media handoff, to the end (seed 003: "Record when your application accepts the delivered
result and when the downstream consumer finishes"; "If a recovered link no longer works,
follow the expired URL versus missing file guide before deciding to regenerate media").

- Accepted: the import that completes a media job stamps `result_accepted_at` and announces
  the handoff through the outbox (recovery.remote.importing); the outbox delivers it once.
- Delivered: `sync_handoffs` mirrors the event's delivery onto RemoteJob.handoff_state
  (guarded moves, recovery.states.delivery.HANDOFF_ALLOWED) and stamps `handoff_delivered_at`.
- Finished: the consumer calls the acknowledgement endpoint with the job's signed token
  (recovery.delivery.media_ack); `consumer_finished` records it once, whatever the repeats.
- A link that no longer works: `refresh_media` looks the job up for a fresh link to the same
  object and checks it. It works -> the link was only expired: nothing is regenerated, the
  fresh link goes to the operator (never stored: it is a temporary credential of its own).
  The provider answers 404/410 for the object -> the file is missing: handoff `missing`, an
  Incident keeps the answer. Only then may an operator `regenerate_media`: a recovery batch of
  the job's tasks, which submits a new, paid, job.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import httpx
from django.db import transaction
from django.utils import timezone

from recovery import audit
from recovery.delivery import media_ack
from recovery.providers.remote_base import ResultUnavailable, exchange_of
from recovery.remote.jobs import keep_incident, provider_for
from recovery.states.choices import DeliveryState, HandoffState
from recovery.states.delivery import move_handoff

if TYPE_CHECKING:
    from recovery.models import RecoveryBatch, RemoteJob

log = logging.getLogger(__name__)


class HandoffError(ValueError):
    """A handoff action that does not apply (no result, wrong state, no reason)."""


class NotAcknowledged(HandoffError):
    """An acknowledgement refused: unknown job or a token that is not its own (one answer for
    both, so the endpoint does not tell which jobs exist)."""


_HANDOFF_PATH: dict[str, list[str]] = {
    # handoff_state follows its outbox event through the delivery machine's allowed moves.
    DeliveryState.SENDING: [DeliveryState.SENDING],
    DeliveryState.DELIVERED: [DeliveryState.SENDING, DeliveryState.DELIVERED],
    DeliveryState.FAILED: [DeliveryState.SENDING, DeliveryState.FAILED],
    DeliveryState.UNCERTAIN: [DeliveryState.SENDING, DeliveryState.UNCERTAIN],
}


def sync_handoffs(limit: int = 100) -> int:
    """Mirror each media handoff's outbox delivery onto RemoteJob.handoff_state (guarded
    moves); returns how many jobs moved. The outbox does the delivering, once per event."""
    from recovery.models import OutboxEvent, RemoteJob

    open_states = [
        HandoffState.UNSENT,
        HandoffState.SENDING,
        HandoffState.FAILED,
        HandoffState.UNCERTAIN,
    ]
    jobs = list(
        RemoteJob.objects.filter(handoff_state__in=open_states).values_list("pk", "handoff_state")[
            :limit
        ]
    )
    moved = 0
    for pk, current in jobs:
        event = (
            OutboxEvent.objects.filter(event_type="media_handoff", payload__remote_job=pk)
            .order_by("created_at")
            .first()
        )
        if event is None or event.state == current:
            continue
        path = _HANDOFF_PATH.get(event.state, [])
        if current in path:
            path = path[path.index(current) + 1 :]
        with transaction.atomic():
            state = current
            for target in path:
                if target == state:
                    continue
                stamp = {}
                if target == HandoffState.DELIVERED:
                    # The destination accepted the handoff (the outbox's delivered time).
                    stamp = {"handoff_delivered_at": event.delivered_at or timezone.now()}
                if not move_handoff(pk, state, target, **stamp):
                    break
                state = target
            moved += state != current
    return moved


def fresh_result_url(job_id: int) -> str:
    """A working link to a completed media job's stored result, obtained by a lookup of the
    job (the stable `result_ref` names the object); never by regenerating the media, and never
    stored: it is a temporary credential of its own."""
    from recovery.models import RemoteJob

    job = RemoteJob.objects.select_related("run__dataset").get(pk=job_id)
    provider_job_id, result_ref = job.provider_job_id, job.result_ref
    if not result_ref or not provider_job_id:
        raise ValueError(f"remote job {job_id} has no stored result reference")
    provider = provider_for(job.run.dataset)

    async def lookup() -> str:
        try:
            return await provider.result_url(provider_job_id, result_ref)
        finally:
            await provider.aclose()

    return asyncio.run(lookup())


# --- the consumer's acknowledgement -----------------------------------------------------------


@dataclass(frozen=True)
class Finished:
    job: int
    finished_at: datetime
    first: bool  # False: an acknowledgement repeated (nothing changed)


# The handoff states an acknowledgement finishes: the consumer holds the document, so it was
# delivered, even when the mirror (sync_handoffs) has not caught up yet.
_FINISHABLE = (
    HandoffState.SENDING,
    HandoffState.DELIVERED,
    HandoffState.FAILED,
    HandoffState.UNCERTAIN,
)


def consumer_finished(job_id: int, token: str) -> Finished:
    """Record that the consumer finished with a media job's result: once, idempotent by job
    (a repeat answers the first time). A wrong token and an unknown job are refused alike."""
    from recovery.models import RemoteJob

    with transaction.atomic():
        job = RemoteJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or not media_ack.valid(job.pk, job.attempt_id, token):
            raise NotAcknowledged("unknown job or invalid acknowledgement token")
        if job.consumer_finished_at is not None:
            return Finished(job.pk, job.consumer_finished_at, first=False)
        if not job.handoff_state or job.handoff_state == HandoffState.UNSENT:
            raise HandoffError(f"remote job {job.pk}: its result was never handed off")
        now = timezone.now()
        if job.handoff_state in _FINISHABLE:
            move_handoff(
                job.pk,
                job.handoff_state,
                HandoffState.FINISHED,
                consumer_finished_at=now,
                handoff_delivered_at=job.handoff_delivered_at or now,
            )
        else:  # missing or regenerated since: the acknowledgement is recorded all the same
            RemoteJob.objects.filter(pk=job.pk, consumer_finished_at=None).update(
                consumer_finished_at=now
            )
        audit.record("consumer", "media_consumer_finished", job, "", was=job.handoff_state)
    log.info("remote job %s: the consumer finished with its result", job.pk)
    return Finished(job.pk, now, first=True)


# --- expired link versus missing file ------------------------------------------------------------

LINK_WORKS = "link_works"
MISSING = "missing"


@dataclass(frozen=True)
class Refreshed:
    job: int
    outcome: str  # LINK_WORKS or MISSING
    detail: str
    url: str = ""  # the fresh link when it works: shown once, never stored


def _probe(url: str, timeout: float) -> httpx.Response:
    """Ask for the object behind a link without downloading it (HEAD)."""
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        return client.head(url)


def refresh_media(job_id: int, actor: str) -> Refreshed:
    """Follow the guide: a fresh link to the same object by a lookup of the job, then check it.

    A link that works means the old one had only expired (the media is not regenerated); a
    404/410 for the object means the file is missing (handoff -> missing, an Incident keeps
    the answer). Any other failure changes nothing and says why (HandoffError)."""
    from recovery.models import RemoteJob

    job = RemoteJob.objects.select_related("run__dataset", "attempt").filter(pk=job_id).first()
    if job is None:
        raise HandoffError(f"remote job {job_id} does not exist")
    if not job.result_ref or not job.provider_job_id or not job.handoff_state:
        raise HandoffError(f"remote job {job.pk} has no handed-off result to refresh")
    if job.handoff_state == HandoffState.REGENERATED:
        raise HandoffError(f"remote job {job.pk}: its media was regenerated in a new job")
    try:
        url = fresh_result_url(job.pk)
    except ResultUnavailable as exc:
        raise HandoffError(f"remote job {job.pk}: no fresh link ({exc})") from None
    timeout = float(getattr(provider_for(job.run.dataset), "request_timeout", 30.0))
    try:
        answer = _probe(url, timeout)
    except httpx.HTTPError as exc:
        raise HandoffError(
            f"remote job {job.pk}: the fresh link could not be checked ({type(exc).__name__})"
        ) from None
    now = timezone.now()
    if answer.status_code in (404, 410):
        detail = (
            f"the provider answers {answer.status_code} for object {job.result_ref}: "
            "the file is missing, not expired"
        )
        with transaction.atomic():
            current = RemoteJob.objects.get(pk=job.pk).handoff_state
            if current != HandoffState.MISSING:
                move_handoff(job.pk, current, HandoffState.MISSING, link_checked_at=now)
            # The signed link's query is its signature: the incident keeps the path only.
            keep_incident(
                job,
                exchange_of(answer, strip_query=True),
                source="result",
                outcome=HandoffState.MISSING,
                detail=detail,
            )
            audit.record(
                actor, "refresh_media", job, "", outcome=MISSING, status=answer.status_code
            )
        log.warning("remote job %s: %s", job.pk, detail)
        return Refreshed(job.pk, MISSING, detail)
    if not 200 <= answer.status_code < 300:
        raise HandoffError(
            f"remote job {job.pk}: the fresh link answers HTTP {answer.status_code}; "
            "nothing was changed"
        )
    with transaction.atomic():
        RemoteJob.objects.filter(pk=job.pk).update(link_checked_at=now)
        audit.record(actor, "refresh_media", job, "", outcome=LINK_WORKS)
    detail = f"the link had expired; a fresh one to object {job.result_ref} works"
    return Refreshed(job.pk, LINK_WORKS, detail, url=url)


def regenerate_media(job_id: int, actor: str, reason: str) -> RecoveryBatch:
    """Make a missing media object again: a recovery batch of the job's tasks, which the worker
    submits as a new, paid, job. Only for a handoff found `missing` (refresh_media first)."""
    from recovery.models import RemoteJob
    from recovery.quality import reruns

    reason = (reason or "").strip()
    if not reason:
        raise HandoffError("a reason is required")
    with transaction.atomic():
        job = RemoteJob.objects.select_for_update().select_related("run").filter(pk=job_id).first()
        if job is None:
            raise HandoffError(f"remote job {job_id} does not exist")
        if job.handoff_state != HandoffState.MISSING:
            raise HandoffError(
                f"remote job {job.pk} is {job.handoff_state or 'not handed off'}; only a result "
                "found missing is regenerated (refresh its link first)"
            )
        task_ids = sorted({int(t["id"]) for t in (job.input_ref or {}).get("tasks", [])})
        try:
            batch = reruns.create_recovery_batch(
                job.run_id,
                task_ids=task_ids,
                reason=f"regenerate the missing media of remote job {job.pk}: {reason}",
                scraper_version=job.run.scraper_version,
                actor=actor,
                expected_tasks=len(task_ids),
            )
        except reruns.RerunError as exc:
            raise HandoffError(str(exc)) from None
        move_handoff(job.pk, HandoffState.MISSING, HandoffState.REGENERATED)
        audit.record(actor, "regenerate_media", job, reason, batch=batch.pk)
    return batch


def handoff_of(job: RemoteJob) -> str:
    """One line for a page or a command: where the job's handoff stands."""
    if not job.handoff_state:
        return "no handoff"
    parts = [job.handoff_state]
    for label, when in (
        ("result accepted", job.result_accepted_at),
        ("delivered", job.handoff_delivered_at),
        ("consumer finished", job.consumer_finished_at),
    ):
        if when is not None:
            parts.append(f"{label} {when.isoformat(timespec='seconds')}")
    return "; ".join(parts)
