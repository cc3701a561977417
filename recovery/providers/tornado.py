"""Seed 003's media-processing jobs (Tornado): one task = one media job.

POST /jobs -> job id (saved at once; the attempt row exists before the call); GET /jobs/{id}
until completed. A completed job stores a *stable object reference* (`result_ref`, the object
key), never only the temporary signed URL; the handoff of the result to the configured consumer
is its own delivery machine (RemoteJob.handoff_state), announced through the outbox
(OutboxEvent media_handoff) in the import transaction. An expired link is refreshed by looking
the job up again (`result_url`), which signs a new link to the same object: the media is never
regenerated for it. No idempotency key is documented for creation, so none is sent.

Options (dataset spec `provider_options`): output_format ("mp4"), preset ("default"),
poll_interval (2 s), poll_timeout (3600 s), request_timeout (30 s).
"""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

from recovery.providers.registry import register
from recovery.providers.remote_base import (
    JobStatus,
    Poll,
    RemoteApiProvider,
    RemoteItem,
    RemoteTask,
    ResultUnavailable,
    SubmitAmbiguous,
    Submitted,
    exchange_of,
    sanitise,
    send_create,
    send_lookup,
)

_PENDING = {"queued", "processing", "pending", "started"}


@register("tornado")
class TornadoProvider(RemoteApiProvider):
    name = "tornado"
    kind = "media"
    tasks_per_job = 1
    handoff = True  # completed jobs are handed to the consumer through the outbox

    def __init__(
        self,
        *,
        output_format: str = "mp4",
        preset: str = "default",
        poll_interval: float = 2.0,
        poll_timeout: float = 3600.0,
        request_timeout: float = 30.0,
        base_url: str | None = None,
        api_key: str | None = None,
        **_ignored: Any,
    ) -> None:
        self.output_format = output_format
        self.preset = preset
        self.poll_interval = float(poll_interval)
        self.poll_timeout = float(poll_timeout)
        self.request_timeout = float(request_timeout)
        self.base_url = (base_url or settings.TORNADO_API_URL or "").rstrip("/")
        self._api_key = api_key if api_key is not None else settings.TORNADO_API_KEY

    def _client_headers(self) -> dict[str, str]:
        return {"X-API-Key": self._api_key}

    def _body(self, tasks: list[RemoteTask]) -> dict[str, Any]:
        return {
            "source_url": tasks[0].url,
            "output": {"format": self.output_format, "preset": self.preset},
        }

    def request_options(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        return {"endpoint": "/jobs", "body": self._body(tasks)}

    async def submit(self, tasks: list[RemoteTask], run_id: int) -> Submitted:
        response = await send_create(
            self._http(),
            "POST",
            f"{self.base_url}/jobs",
            json=self._body(tasks),
            deadline=self.request_timeout,
        )
        try:
            job_id = str(response.json()["job_id"])
        except (ValueError, KeyError, TypeError):
            raise SubmitAmbiguous(
                f"HTTP {response.status_code} without a job_id",
                response.status_code,
                exchange_of(response),
            ) from None
        return Submitted(job_id, {"job_id": job_id})

    async def _lookup(
        self, provider_job_id: str
    ) -> tuple[dict[str, Any], httpx.Response] | JobStatus:
        answer = await send_lookup(
            self._http(), f"{self.base_url}/jobs/{provider_job_id}", deadline=self.request_timeout
        )
        if isinstance(answer, JobStatus):
            return answer
        try:
            job = dict(answer.json())
            job["status"] = str(job["status"]).lower()
        except (ValueError, KeyError, TypeError):
            return JobStatus(Poll.RETRY, detail="status answer without a status")
        return job, answer

    async def status(self, provider_job_id: str) -> JobStatus:
        found = await self._lookup(provider_job_id)
        if isinstance(found, JobStatus):
            return found
        job, answer = found
        state = job["status"]
        result = job.get("result") if isinstance(job.get("result"), dict) else {}
        # The signed URL is a temporary credential of its own: it is never stored.
        summary = sanitise(
            {
                "job_id": job.get("job_id"),
                "status": state,
                "object_key": result.get("object_key"),
                "bytes": result.get("bytes"),
                "error": job.get("error"),
            }
        )
        if state in _PENDING:
            return JobStatus(Poll.PENDING, response=summary)
        if state == "failed":
            return JobStatus(
                Poll.FAILURE,
                detail=str(job.get("error") or state),
                response=summary,
                exchange=exchange_of(answer),
            )
        if state in ("cancelled", "canceled", "revoked"):
            return JobStatus(Poll.REVOKED, response=summary, exchange=exchange_of(answer))
        if state != "completed":
            return JobStatus(Poll.RETRY, detail=f"unexpected status {state!r}", response=summary)
        object_key = str(result.get("object_key") or "")
        if not object_key:
            return JobStatus(Poll.RETRY, detail="completed without an object key", response=summary)
        payload = {
            "object_key": object_key,
            "format": result.get("format"),
            "bytes": result.get("bytes"),
        }
        return JobStatus(
            Poll.SUCCESS,
            items=[RemoteItem(0, "", "success", payload)],
            response=summary,
            result_ref=object_key,
        )

    async def result_url(self, provider_job_id: str, result_ref: str) -> str:
        """A fresh signed link to the stored object, by looking the job up (no regeneration)."""
        found = await self._lookup(provider_job_id)
        if isinstance(found, JobStatus):
            raise ResultUnavailable(found.detail or found.outcome)
        job, _answer = found
        result = job.get("result") if isinstance(job.get("result"), dict) else {}
        if job["status"] != "completed" or result.get("object_key") != result_ref:
            raise ResultUnavailable(f"job {provider_job_id} has no result {result_ref!r}")
        return str(result["url"])
