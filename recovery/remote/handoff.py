"""Media handoff: the outbox delivers a completed media job's result once; this mirrors the
delivery onto RemoteJob.handoff_state and looks up a fresh result link on demand."""

from __future__ import annotations

import asyncio
import logging

from django.db import transaction

from recovery.remote.jobs import provider_for
from recovery.states.delivery import DeliveryState

log = logging.getLogger(__name__)


_HANDOFF_PATH = {
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
    from recovery.states import delivery

    open_states = [
        DeliveryState.UNSENT,
        DeliveryState.SENDING,
        DeliveryState.FAILED,
        DeliveryState.UNCERTAIN,
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
                if not delivery.move(RemoteJob, pk, state, target, field="handoff_state"):
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
    if not job.result_ref or not job.provider_job_id:
        raise ValueError(f"remote job {job_id} has no stored result reference")
    provider = provider_for(job.run.dataset)

    async def lookup() -> str:
        try:
            return await provider.result_url(job.provider_job_id, job.result_ref)
        finally:
            await provider.aclose()

    return asyncio.run(lookup())
