"""Web Scraper Cloud (seed 002, "Apply the pattern with Web Scraper Cloud").

The run's tasks become the start URLs of one Cloud scraping job (POST
/api/v1/scraping-job with sitemap_id, start_urls and custom_id = our run id); Cloud runs the
sitemap and retries empty and failed pages itself. The final-status webhook
(recovery.remote.webhooks) only makes the job due; the status is always confirmed here, through the
API, and data is downloaded (JSON lines) only for a job the API calls "finished" -- and the
status is checked again after the download, so a snapshot taken while a Continue started is
never promoted as complete.

The API token travels as the `api_token` query parameter (that is the documented contract),
so it is added to each request's params at call time and every URL we log or store goes
through recovery.ops.logs.redact. The API documents no creation idempotency key: none is sent.

Every launch passes the tasks' URLs as one-time custom start URLs (`start_urls`): they narrow
that job only and never change the sitemap, so a recovery batch launches exactly the URLs it
selected (seed 002: "one-time custom start URLs can narrow a Cloud launch without permanently
changing the sitemap").

The sitemap itself is built and validated first (seed 002): `sitemap_file` names the
extension's JSON export, which `manage.py cloudsitemap` checks here and then creates or updates
in the account (recovery.providers.webscraper_sitemaps, recovery.remote.cloud_sitemaps),
recording its id as `sitemap_id`.

Options (dataset spec `provider_options`): sitemap_id (required to launch; written by
cloudsitemap when the spec names a sitemap_file), sitemap_file, driver ("fast" or "fulljs"),
page_load_delay, request_interval, proxy, batch_size (start URLs per job, 1000),
poll_interval (60 s: the webhook makes a finished job due at once), poll_timeout (24 h),
request_timeout (30 s).
"""

from __future__ import annotations

import json
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
    SubmitAmbiguous,
    Submitted,
    exchange_of,
    sanitise,
    send_create,
    send_lookup,
)
from recovery.providers.webscraper_sitemaps import SitemapApi

_PENDING = {"waiting-to-be-scheduled", "scheduling", "scheduled", "started", "shelved"}
# Problem entries get indexes far above any data row, so rows that a Continue appends later
# never collide with them in RemoteJobItem's (job, item_index) key.
PROBLEM_INDEX_BASE = 1_000_000_000


DRIVERS = ("fast", "fulljs")
_INTEGERS = ("page_load_delay", "request_interval", "proxy", "batch_size")
_SECONDS = ("poll_interval", "poll_timeout", "request_timeout")


def parse_options(options: dict[str, Any]) -> dict[str, Any]:
    """The spec's provider_options, checked at load time (recovery.intake.specs): each value's
    type and range; a sitemap_id, a sitemap_file or both (the command that pushes the file
    records the id)."""
    sitemap_id = options.get("sitemap_id")
    if sitemap_id is not None and (
        isinstance(sitemap_id, bool) or not str(sitemap_id).isdigit() or int(sitemap_id) < 1
    ):
        raise ValueError(f"provider_options.sitemap_id: {sitemap_id!r} is not a sitemap number")
    sitemap_file = options.get("sitemap_file")
    if sitemap_file is not None and (
        not isinstance(sitemap_file, str) or not sitemap_file.endswith(".json")
    ):
        raise ValueError(
            f"provider_options.sitemap_file: {sitemap_file!r} is not the path of a .json file"
        )
    if sitemap_id is None and sitemap_file is None:
        raise ValueError(
            "provider_options: webscraper needs sitemap_id, or sitemap_file (then run "
            "manage.py cloudsitemap DATASET to create it in the account)"
        )
    if options.get("driver", "fast") not in DRIVERS:
        raise ValueError(f"provider_options.driver: one of {', '.join(DRIVERS)}")
    for key in _INTEGERS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"provider_options.{key}: a whole number, not {value!r}")
        if value is not None and value < (1 if key == "batch_size" else 0):
            raise ValueError(f"provider_options.{key}: {value} is too small")
    for key in _SECONDS:
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"provider_options.{key}: a number of seconds, not {value!r}")
        if value is not None and value < 0:
            raise ValueError(f"provider_options.{key}: {value} is negative")
    return options


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
        sitemap_file: str | None = None,
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
        self.sitemap_file = sitemap_file
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
        # store goes through recovery.ops.logs.redact.
        return {"api_token": self._token}

    def sitemaps(self) -> SitemapApi:
        """The account's sitemap calls, on this provider's client and token."""
        return SitemapApi(self._http(), self.base_url, self._token, self.request_timeout)

    def _body(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        if self.sitemap_id in (None, ""):
            raise ValueError(
                "webscraper: provider_options.sitemap_id is required (manage.py cloudsitemap "
                "DATASET creates the spec's sitemap_file in the account and records it)"
            )
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
                f"HTTP {response.status_code} without a scraping job id",
                response.status_code,
                exchange_of(response),
            ) from None
        return Submitted(job_id, sanitise({"id": job_id, "custom_id": data.get("custom_id")}))

    async def _job(self, job_id: str) -> tuple[dict[str, Any], httpx.Response] | JobStatus:
        answer = await send_lookup(
            self._http(),
            f"{self.base_url}/api/v1/scraping-job/{job_id}",
            params=self._auth(),
            deadline=self.request_timeout,
        )
        if isinstance(answer, JobStatus):
            return answer
        try:
            return dict(answer.json()["data"]), answer
        except (ValueError, KeyError, TypeError):
            return JobStatus(Poll.RETRY, detail="status answer without data")

    async def status(self, provider_job_id: str) -> JobStatus:
        found = await self._job(provider_job_id)
        if isinstance(found, JobStatus):
            return found
        job, answer = found
        state = str(job.get("status") or "").lower()
        keep = ("id", "custom_id", "status", "sitemap_id", "sitemap_name", "stored_record_count")
        summary = sanitise({k: job.get(k) for k in (*keep, "jobs_executed", "jobs_failed")})
        if state in _PENDING:
            return JobStatus(Poll.PENDING, response=summary)
        if state == "failed":
            return JobStatus(
                Poll.FAILURE,
                detail="scraping job failed",
                response=summary,
                exchange=exchange_of(answer),
            )
        if state == "stopped":
            return JobStatus(
                Poll.REVOKED,
                detail="scraping job stopped",
                response=summary,
                exchange=exchange_of(answer),
            )
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
        confirmed = await self._job(provider_job_id)
        if isinstance(confirmed, JobStatus):
            return confirmed
        again, _answer = confirmed
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
