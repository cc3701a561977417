"""Web Scraper Cloud (seed 002, "Apply the pattern with Web Scraper Cloud").

The run's tasks become the start URLs of one Cloud scraping job (POST
/api/v1/scraping-job with sitemap_id, start_urls and custom_id = our run id); Cloud runs the
sitemap and retries empty and failed pages itself. The final-status webhook
(recovery.webhooks) only makes the job due; the status is always confirmed here, through the
API, and data is downloaded (JSON lines) only for a job the API calls "finished" -- and the
status is checked again after the download, so a snapshot taken while a Continue started is
never promoted as complete.

The API token travels as the `api_token` query parameter (that is the documented contract),
so it is added to each request's params at call time and every URL we log or store goes
through recovery.logs.redact. The API documents no creation idempotency key: none is sent.

Options (dataset spec `provider_options`): sitemap_id (required), driver ("fast"),
page_load_delay, request_interval, proxy, batch_size (start URLs per job, 1000),
poll_interval (60 s: the webhook makes a finished job due at once), poll_timeout (24 h),
request_timeout (30 s).
"""

from __future__ import annotations

import json
from typing import Any

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
    sanitise,
    send_create,
    send_lookup,
)

_PENDING = {"waiting-to-be-scheduled", "scheduling", "scheduled", "started", "shelved"}
# Problem entries get indexes far above any data row, so rows that a Continue appends later
# never collide with them in RemoteJobItem's (job, item_index) key.
PROBLEM_INDEX_BASE = 1_000_000_000


def _order_key(row: dict[str, Any]) -> tuple[int, ...]:
    # "web-scraper-order" is "<timestamp>-<n>": sorting by it keeps row positions stable
    # across downloads, and rows a Continue adds come after the ones already imported.
    raw = str(row.get("web-scraper-order") or "")
    try:
        return tuple(int(part) for part in raw.split("-"))
    except ValueError:
        return (2**62,)


@register("webscraper")
class WebScraperProvider(RemoteApiProvider):
    name = "webscraper"
    kind = "cloud"

    def __init__(
        self,
        *,
        sitemap_id: int | str | None = None,
        driver: str = "fast",
        page_load_delay: int = 2000,
        request_interval: int = 2000,
        proxy: int = 0,
        batch_size: int = 1000,
        poll_interval: float = 60.0,
        poll_timeout: float = 24 * 3600.0,
        request_timeout: float = 30.0,
        base_url: str | None = None,
        api_token: str | None = None,
        **_ignored: Any,
    ) -> None:
        self.sitemap_id = sitemap_id
        self.driver = driver
        self.page_load_delay = int(page_load_delay)
        self.request_interval = int(request_interval)
        self.proxy = int(proxy)
        self.tasks_per_job = int(batch_size)
        self.poll_interval = float(poll_interval)
        self.poll_timeout = float(poll_timeout)
        self.request_timeout = float(request_timeout)
        self.base_url = (base_url or settings.WEBSCRAPER_API_URL).rstrip("/")
        self._token = api_token if api_token is not None else settings.WEBSCRAPER_API_TOKEN

    def _auth(self) -> dict[str, str]:
        # The documented contract puts the token in the query string: every URL we log or
        # store goes through recovery.logs.redact.
        return {"api_token": self._token}

    def _body(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        if self.sitemap_id in (None, ""):
            raise ValueError("webscraper: provider_options.sitemap_id is required")
        return {
            "sitemap_id": int(self.sitemap_id),
            "driver": self.driver,
            "page_load_delay": self.page_load_delay,
            "request_interval": self.request_interval,
            "proxy": self.proxy,
            "start_urls": [t.url for t in tasks],
            "custom_id": str(run_id),
        }

    def request_options(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        body = self._body(tasks, run_id)
        return {"endpoint": "/api/v1/scraping-job", "body": {**body, "start_urls": len(tasks)}}

    async def submit(self, tasks: list[RemoteTask], run_id: int) -> Submitted:
        response = await send_create(
            self._http(),
            "POST",
            f"{self.base_url}/api/v1/scraping-job",
            params=self._auth(),
            json=self._body(tasks, run_id),
            deadline=self.request_timeout,
        )
        try:
            data = response.json()["data"]
            job_id = str(int(data["id"]))
        except (ValueError, KeyError, TypeError):
            raise SubmitAmbiguous(
                f"HTTP {response.status_code} without a scraping job id", response.status_code
            ) from None
        return Submitted(job_id, sanitise({"id": job_id, "custom_id": data.get("custom_id")}))

    async def _job(self, job_id: str) -> dict[str, Any] | JobStatus:
        answer = await send_lookup(
            self._http(),
            f"{self.base_url}/api/v1/scraping-job/{job_id}",
            params=self._auth(),
            deadline=self.request_timeout,
        )
        if isinstance(answer, JobStatus):
            return answer
        try:
            return dict(answer.json()["data"])
        except (ValueError, KeyError, TypeError):
            return JobStatus(Poll.RETRY, detail="status answer without data")

    async def status(self, provider_job_id: str) -> JobStatus:
        job = await self._job(provider_job_id)
        if isinstance(job, JobStatus):
            return job
        state = str(job.get("status") or "").lower()
        keep = ("id", "custom_id", "status", "sitemap_id", "sitemap_name", "stored_record_count")
        summary = sanitise({k: job.get(k) for k in (*keep, "jobs_executed", "jobs_failed")})
        if state in _PENDING:
            return JobStatus(Poll.PENDING, response=summary)
        if state == "failed":
            return JobStatus(Poll.FAILURE, detail="scraping job failed", response=summary)
        if state == "stopped":
            return JobStatus(Poll.REVOKED, detail="scraping job stopped", response=summary)
        if state != "finished":
            return JobStatus(Poll.RETRY, detail=f"unexpected status {state!r}", response=summary)

        data = await send_lookup(
            self._http(),
            f"{self.base_url}/api/v1/scraping-job/{provider_job_id}/json",
            params=self._auth(),
            deadline=self.request_timeout * 4,
        )
        if isinstance(data, JobStatus):
            return data
        problems = await send_lookup(
            self._http(),
            f"{self.base_url}/api/v1/scraping-job/{provider_job_id}/problematic-urls",
            params=self._auth(),
            deadline=self.request_timeout,
        )
        if isinstance(problems, JobStatus):
            return problems
        # Confirm again: a Continue that started during the download makes it a snapshot of a
        # running job, which is never promoted as the complete result.
        again = await self._job(provider_job_id)
        if isinstance(again, JobStatus):
            return again
        if str(again.get("status") or "").lower() != "finished" or again.get(
            "stored_record_count"
        ) != job.get("stored_record_count"):
            return JobStatus(
                Poll.PENDING, response=sanitise({**summary, "status": again.get("status")})
            )

        rows = []
        for line in data.text.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
        rows.sort(key=_order_key)
        items = []
        for index, row in enumerate(rows):
            start = str(row.get("web-scraper-start-url") or "")
            own = str(row.get("url") or start)
            payload = {k: v for k, v in row.items() if k != "web-scraper-order"}
            items.append(RemoteItem(index, own, "success", payload, task_url=start or own))
        try:
            problem_rows = list(problems.json().get("data") or [])
        except (ValueError, AttributeError):
            problem_rows = []
        for i, problem in enumerate(problem_rows):
            if not isinstance(problem, dict):
                continue
            url = str(problem.get("url") or "")
            kind = str(problem.get("type") or "failed").lower()
            items.append(
                RemoteItem(PROBLEM_INDEX_BASE + i, url, "empty" if kind == "empty" else "failed")
            )
        summary["rows"] = len(rows)
        summary["problematic_urls"] = len(problem_rows)
        return JobStatus(Poll.SUCCESS, items=items, response=summary)
