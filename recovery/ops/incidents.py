"""Incident records: a provider's terminal error kept whole, sanitised (seed 001 §04).

Written where the answer is recorded, in the same transaction as what it meant (a job failed,
refused, unknown or not found; a page quarantined; a media object gone; a sitemap refused), so
an incident exists exactly when its consequence does. What is kept comes from one `Exchange`
(what was asked, what came back), built by `recovery.providers.remote_base.exchange_of` or, for
a page, from the attempt's artefact; every part of it passed `recovery.ops.sanitise`.

Retention: an incident lives as long as its run's triage files (`manage.py pruneartefacts`:
runs published more than --published-days ago lose both); one without a run (a sitemap
refusal) stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from recovery.ops import logs, sanitise

if TYPE_CHECKING:
    from recovery.models import Incident

# The models are imported where used: the providers import this module (for Exchange), and a
# provider module may be imported before Django's app registry is ready.


@dataclass(slots=True)
class Exchange:
    """One HTTP exchange with a provider, already sanitised: what an Incident keeps of it."""

    method: str
    endpoint: str  # the URL with credentials redacted (or, for a signed link, without query)
    http_status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    truncated: bool = False
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


def exchange(
    method: str,
    url: str,
    http_status: int | None,
    headers: Iterable[tuple[str, str]] = (),
    body: str = "",
) -> Exchange:
    """An Exchange from raw parts: every part sanitised here."""
    text, truncated = sanitise.body(body)
    return Exchange(
        method=method.upper()[:10],
        endpoint=logs.redact(url)[:4000],
        http_status=http_status,
        headers=sanitise.headers(headers),
        body=text,
        truncated=truncated,
    )


def record(
    seen: Exchange,
    *,
    provider: str,
    source: str,
    outcome: str = "",
    detail: str = "",
    request_options: Mapping[str, Any] | None = None,
    run_id: int | None = None,
    remote_job_id: int | None = None,
    attempt_id: UUID | None = None,
    task_id: int | None = None,
) -> Incident:
    """Write one Incident (in the caller's transaction)."""
    from recovery.models import Incident

    return Incident.objects.create(
        provider=provider[:32],
        source=source,
        outcome=outcome[:32],
        detail=logs.redact(detail)[:4000],
        method=seen.method,
        endpoint=seen.endpoint,
        http_status=seen.http_status,
        occurred_at=seen.at,
        request_options=sanitise.sanitise(dict(request_options or {})),
        response_headers=seen.headers,
        response_body=seen.body,
        body_truncated=seen.truncated,
        run_id=run_id,
        remote_job_id=remote_job_id,
        attempt_id=attempt_id,
        task_id=task_id,
    )


@dataclass(slots=True)
class PageResponse:
    """A direct or browser response that quarantined its task, as the commit knows it."""

    provider: str
    url: str
    run_id: int
    task_id: int
    attempt_id: UUID
    error_class: str
    detail: str
    artefact: Mapping[str, Any]
    request_options: dict[str, Any] = field(default_factory=dict)


def record_pages(pages: list[PageResponse], at: datetime) -> int:
    """One Incident per quarantining page response (the fenced commit calls this for the
    tasks it quarantined). The artefact is what the engine already stores, sanitised by
    recovery.failures.sanitise_artefact: status, headers without credentials, a body excerpt."""
    from recovery.models import Incident

    rows = []
    for page in pages:
        art = page.artefact
        given = art.get("headers")
        headers: Mapping[str, Any] = given if isinstance(given, dict) else {}
        text, truncated = sanitise.body(str(art.get("body_excerpt") or ""))
        status = art.get("status")
        rows.append(
            Incident(
                provider=page.provider[:32],
                source=Incident.Source.PAGE,
                outcome=page.error_class[:32],
                detail=logs.redact(page.detail)[:4000],
                method="GET",
                endpoint=logs.redact(page.url)[:4000],
                http_status=status if isinstance(status, int) else None,
                occurred_at=at,
                request_options=sanitise.sanitise(page.request_options),
                response_headers=sanitise.headers((str(k), str(v)) for k, v in headers.items()),
                response_body=text,
                body_truncated=truncated,
                run_id=page.run_id,
                task_id=page.task_id,
                attempt_id=page.attempt_id,
            )
        )
    Incident.objects.bulk_create(rows)
    return len(rows)


def prune(*, published_days: int, dry_run: bool = False) -> int:
    """Delete the incidents of runs published more than `published_days` ago (the artefact
    files' rule, recovery.fetch.artefacts.prune); returns how many went (or would go)."""
    from django.utils import timezone

    from recovery.models import Incident
    from recovery.states.choices import RunState

    cutoff = timezone.now() - timedelta(days=published_days)
    old = Incident.objects.filter(
        run__acceptance_state=RunState.PUBLISHED, run__published_at__lt=cutoff
    )
    if dry_run:
        return old.count()
    deleted, _by_model = old.delete()
    return deleted
