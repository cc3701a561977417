"""The consumer's acknowledgement of a media handoff (seed 003: "record ... when the downstream
consumer finishes"): where it calls and the per-job token it presents.

The token is signed, never stored: an HMAC of the job and its attempt under the deployment's
SECRET_KEY (Django's salted_hmac), so the database holds nothing that would let anyone forge
an acknowledgement, and a token of one job is worth nothing for another. It travels only in
the handoff document the outbox delivers (`recovery.delivery.outbox.document`, computed at send
time, the same bytes on every attempt) and back in the consumer's `Authorization: Bearer`
header, never in a URL, so no access log line carries it.
"""

from __future__ import annotations

from typing import Any

from django.utils.crypto import constant_time_compare, salted_hmac

_SALT = "salvage.media-handoff.acknowledge"


def token(job_pk: int, attempt_id: Any) -> str:
    """The job's acknowledgement token (deterministic: the same on every delivery attempt)."""
    return salted_hmac(_SALT, f"{job_pk}:{attempt_id}", algorithm="sha256").hexdigest()


def valid(job_pk: int, attempt_id: Any, given: str) -> bool:
    return bool(given) and constant_time_compare(token(job_pk, attempt_id), given)


def path(job_pk: int) -> str:
    """The acknowledgement endpoint, relative to the dashboard's origin (recovery.urls)."""
    return f"/hooks/media/{job_pk}/finished"


def block(job_pk: int, attempt_id: Any) -> dict[str, str]:
    """What the handoff document tells the consumer about acknowledging."""
    return {
        "method": "POST",
        "path": path(job_pk),
        "authorization": f"Bearer {token(job_pk, attempt_id)}",
    }
