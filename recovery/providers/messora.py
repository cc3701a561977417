"""Seed 000's asynchronous scraping API: POST /batch, /crawl, /search -> 202 {"job_id"};
GET /jobs/{id} -> {"status": PENDING | STARTED | SUCCESS | FAILURE | REVOKED, "results",
"credits_used", "stopped_reason"}; the key travels in the X-API-Key header.

The API documents no idempotency key, so none is sent (seed 001: never invent one); an
ambiguous create goes to the reconcile queue instead (recovery.remote).

Options (dataset spec `provider_options`): kind = "batch" | "crawl" | "search" (default
batch), formats (["markdown"]), batch_size (50 URLs a job), crawl_limit, search_limit,
poll_interval (2 s, the documented cadence), poll_timeout (600 s per job), request_timeout (30 s).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings

from recovery.providers.registry import register
from recovery.providers.remote_base import (
    JobStatus,
    Poll,
    RemoteApiProvider,
    RemoteItem,
    RemoteTask,
    SubmitAmbiguous,
    Submitted,
    exchange_of,
    sanitise,
    send_create,
    send_lookup,
)

KINDS = ("batch", "crawl", "search")
_PENDING = {"PENDING", "STARTED", "RECEIVED", "RETRY", "PROGRESS"}


@register("messora")
class MessoraProvider(RemoteApiProvider):
    name = "messora"

    def __init__(
        self,
        *,
        kind: str = "batch",
        formats: list[str] | tuple[str, ...] = ("markdown",),
        batch_size: int = 50,
        crawl_limit: int = 20,
        search_limit: int = 10,
        poll_interval: float = 2.0,
        poll_timeout: float = 600.0,
        request_timeout: float = 30.0,
        base_url: str | None = None,
        api_key: str | None = None,
        **_ignored: Any,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"messora: kind {kind!r} is not one of {', '.join(KINDS)}")
        self.kind = kind
        self.formats = list(formats)
        self.tasks_per_job = int(batch_size) if kind == "batch" else 1
        self.crawl_limit = int(crawl_limit)
        self.search_limit = int(search_limit)
        self.poll_interval = float(poll_interval)
        self.poll_timeout = float(poll_timeout)
        self.request_timeout = float(request_timeout)
        self.base_url = (base_url or settings.MESSORA_API_URL).rstrip("/")
        # Read at call time from settings only: never stored, never logged.
        self._api_key = api_key if api_key is not None else settings.MESSORA_API_KEY

    def _client_headers(self) -> dict[str, str]:
        return {"X-API-Key": self._api_key}

    # --- submission ---

    def _body(self, tasks: list[RemoteTask]) -> dict[str, Any]:
        if self.kind == "batch":
            return {"urls": [t.url for t in tasks], "formats": self.formats}
        task = tasks[0]
        if self.kind == "crawl":
            return {"url": task.url, "limit": self.crawl_limit, "formats": self.formats}
        query = (
            task.navigation.get("query")
            or (parse_qs(urlsplit(task.url).query).get("q", [task.url])[0])
        )
        return {"query": query, "limit": self.search_limit, "formats": self.formats}

    def request_options(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        body = self._body(tasks)
        if "urls" in body:  # the URLs are already in input_ref; keep the options small
            body = {**body, "urls": len(body["urls"])}
        return {"endpoint": f"/{self.kind}", "body": body}

    async def submit(self, tasks: list[RemoteTask], run_id: int) -> Submitted:
        response = await send_create(
            self._http(),
            "POST",
            f"{self.base_url}/{self.kind}",
            json=self._body(tasks),
            deadline=self.request_timeout,
        )
        try:
            data = response.json()
            job_id = str(data["job_id"])
        except (ValueError, KeyError, TypeError):
            # Accepted, but no readable id: a job may exist that we cannot name.
            raise SubmitAmbiguous(
                f"HTTP {response.status_code} without a job_id",
                response.status_code,
                exchange_of(response),
            ) from None
        return Submitted(job_id, sanitise({"status": data.get("status"), "job_id": job_id}))

    # --- collection ---

    async def status(self, provider_job_id: str) -> JobStatus:
        answer = await send_lookup(
            self._http(), f"{self.base_url}/jobs/{provider_job_id}", deadline=self.request_timeout
        )
        if isinstance(answer, JobStatus):
            return answer
        try:
            job = answer.json()
            state = str(job["status"]).upper()
        except (ValueError, KeyError, TypeError):
            return JobStatus(Poll.RETRY, detail="status answer without a status")
        summary = sanitise(
            {k: job.get(k) for k in ("job_id", "status", "credits_used", "stopped_reason", "error")}
        )
        credits = job.get("credits_used")
        credits = int(credits) if isinstance(credits, int | float) else None
        if state in _PENDING:
            return JobStatus(Poll.PENDING, response=summary)
        if state == "FAILURE":
            return JobStatus(
                Poll.FAILURE,
                credits_used=credits,
                detail=str(job.get("error") or "FAILURE"),
                response=summary,
                exchange=exchange_of(answer),
            )
        if state == "REVOKED":
            return JobStatus(
                Poll.REVOKED, credits_used=credits, response=summary, exchange=exchange_of(answer)
            )
        if state != "SUCCESS":
            return JobStatus(Poll.RETRY, detail=f"unexpected status {state!r}", response=summary)
        items = []
        for index, entry in enumerate(job.get("results") or []):
            if not isinstance(entry, dict):
                continue
            item_status = str(entry.get("scrape_status") or "success").lower()
            payload = None
            if item_status in ("success", "ok"):
                payload = {
                    k: v for k, v in entry.items() if k not in ("scrape_status",) and v is not None
                }
            items.append(RemoteItem(index, str(entry.get("url") or ""), item_status, payload))
        summary["result_count"] = len(items)
        return JobStatus(
            Poll.SUCCESS,
            items=items,
            credits_used=credits,
            stopped_reason=str(job.get("stopped_reason") or ""),
            response=summary,
        )
