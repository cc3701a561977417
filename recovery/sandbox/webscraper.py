"""Simulator of the Web Scraper Cloud API (the parts Salvage uses), on its documented contract.

- The API token travels as the `api_token` query parameter; a job belongs to its token's
  account and another account's token gets 404.
- POST /api/v1/scraping-job {sitemap_id, start_urls, custom_id, ...}
  -> {"success": true, "data": {"id": N}}. There is no creation idempotency key.
- GET /api/v1/scraping-job/{id} -> {"success": true, "data": {"id", "custom_id", "status",
  "sitemap_id", "sitemap_name", "stored_record_count", "jobs_executed", "jobs_failed", ...}}
  (status: scheduled -> started -> finished; also failed, stopped).
- GET /api/v1/scraping-job/{id}/json -> the data as JSON lines (a snapshot if still running).
- GET /api/v1/scraping-job/{id}/problematic-urls -> {"data": [{"url", "type": failed|empty}]}.
- When a job finishes it POSTs the final-status notification, form-encoded (scrapingjob_id,
  status, sitemap_id, sitemap_name, custom_id), to `webhook_url`, resending when no 2xx arrives
  within `webhook_timeout` seconds (the real service waits about 10 s).

Faults (counters, -1 = always), set by make_app(faults=...) or POST /_sim/faults:
create_drop, create_slow, create_429, status_5xx, status_429, hold (stay "started" until
POST /_sim/finish/{id}), partial (start URL #2 fails, #3 is empty), duplicate_webhook (notify
twice), early_webhook (a "finished" notification while the job still runs: out of order),
start_on_download (a download flips the job back to "started", as a Continue racing it would).
POST /_sim/continue/{id} {"rows": k} plays the console's Continue: the job runs again, k more
rows appear, and a new notification is sent. GET /_sim/stats counts jobs and notifications.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp
from aiohttp import web

from recovery.sandbox.switches import FaultSwitches

DEFAULT_TOKENS = {"sandbox-webscraper-token": "account-a", "sandbox-webscraper-other": "account-b"}


class State(FaultSwitches):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.tokens: dict[str, str] = dict(options.get("api_tokens") or DEFAULT_TOKENS)
        self.run_seconds = float(options.get("run_seconds", 0.3))
        self.slow_seconds = float(options.get("slow_seconds", 5.0))
        self.webhook_url: str = options.get("webhook_url", "")
        self.webhook_timeout = float(options.get("webhook_timeout", 2.0))
        self.webhook_attempts = int(options.get("webhook_attempts", 3))
        self.jobs: dict[int, dict[str, Any]] = {}
        self.created = 0
        self.notifications: list[dict[str, Any]] = []  # every POST attempt, with its answer
        self._ids = itertools.count(500)
        self.tasks: set[asyncio.Task] = set()


STATE = web.AppKey("state", State)


def _row(job_id: int, n: int, start_url: str) -> dict[str, Any]:
    return {
        "web-scraper-order": f"{1700000000 + job_id}-{n}",
        "web-scraper-start-url": start_url,
        "url": f"{start_url.rstrip('/')}/variant-{n}" if n else start_url,
        "title": f"Product {n}",
        "price": f"{10 + n}.99",
    }


def make_app(**options: Any) -> web.Application:
    state = State(**options)
    app = web.Application()
    app[STATE] = state

    def account(request: web.Request) -> str | None:
        return state.tokens.get(request.query.get("api_token", ""))

    def denied() -> web.Response:
        return web.json_response({"success": False, "error": "invalid api_token"}, status=401)

    def job_for(request: web.Request) -> dict[str, Any] | None:
        who = account(request)
        try:
            job = state.jobs.get(int(request.match_info["job_id"]))
        except ValueError:
            return None
        return job if job is not None and job["account"] == who else None

    async def notify(job: dict[str, Any], status: str) -> None:
        if not state.webhook_url:
            return
        form = {
            "scrapingjob_id": str(job["id"]),
            "status": status,
            "sitemap_id": str(job["sitemap_id"]),
            "sitemap_name": "sandbox-shop",
            "custom_id": job["custom_id"],
        }
        timeout = aiohttp.ClientTimeout(total=state.webhook_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for _ in range(state.webhook_attempts):
                entry = {"job": job["id"], "status": status, "at": time.time(), "answer": None}
                state.notifications.append(entry)
                try:
                    async with session.post(state.webhook_url, data=form) as response:
                        entry["answer"] = response.status
                        if 200 <= response.status < 300:
                            return
                except (aiohttp.ClientError, TimeoutError) as exc:
                    entry["answer"] = type(exc).__name__
                # No 2xx in time: the service sends the notification again.

    def spawn(coro) -> None:
        task = asyncio.ensure_future(coro)
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)

    async def run(job: dict[str, Any], extra_rows: int = 0) -> None:
        job["status"] = "started"
        if job["early_webhook"]:
            job["early_webhook"] = False
            spawn(notify(job, "finished"))  # a hint that contradicts the API: out of order
        await asyncio.sleep(state.run_seconds)
        while job["held"]:
            await asyncio.sleep(0.05)
        finish(job, extra_rows)
        spawn(notify(job, "finished"))
        if job["duplicate_webhook"]:
            spawn(notify(job, "finished"))

    def finish(job: dict[str, Any], extra_rows: int = 0) -> None:
        if not job["rows"]:
            for i, url in enumerate(job["start_urls"]):
                kind = job["problems"].get(i)
                if kind:
                    job["problem_urls"].append({"url": url, "type": kind})
                else:
                    job["rows"].append(_row(job["id"], len(job["rows"]), url))
        first_url = job["start_urls"][0] if job["start_urls"] else "http://shop.test/"
        for _ in range(extra_rows):
            job["rows"].append(_row(job["id"], len(job["rows"]), first_url))
        job["status"] = "finished"

    async def create(request: web.Request) -> web.StreamResponse:
        who = account(request)
        if who is None:
            return denied()
        if state.fire("create_429"):
            return web.json_response(
                {"success": False}, status=429, headers={"Retry-After": state.retry_after()}
            )
        try:
            body = await request.json()
            sitemap_id = int(body["sitemap_id"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"success": False, "error": "sitemap_id required"}, status=400)
        job_id = next(state._ids)
        state.created += 1
        job = {
            "id": job_id,
            "account": who,
            "sitemap_id": sitemap_id,
            "custom_id": str(body.get("custom_id") or ""),
            "start_urls": list(body.get("start_urls") or ["http://shop.test/"]),
            "status": "scheduled",
            "rows": [],
            "problem_urls": [],
            "problems": {1: "failed", 2: "empty"} if state.fire("partial") else {},
            "held": state.fire("hold"),
            "early_webhook": state.fire("early_webhook"),
            "duplicate_webhook": state.fire("duplicate_webhook"),
            "downloads": 0,
        }
        state.jobs[job_id] = job
        spawn(run(job))
        if state.fire("create_drop"):
            request.transport.close()
            raise asyncio.CancelledError
        if state.fire("create_slow"):
            await asyncio.sleep(state.slow_seconds)
        return web.json_response(
            {"success": True, "data": {"id": job_id, "custom_id": job["custom_id"]}}
        )

    async def status(request: web.Request) -> web.Response:
        if account(request) is None:
            return denied()
        job = job_for(request)
        if job is None:
            return web.json_response({"success": False, "error": "not found"}, status=404)
        if state.fire("status_429"):
            return web.json_response(
                {"success": False}, status=429, headers={"Retry-After": state.retry_after()}
            )
        if state.fire("status_5xx"):
            return web.json_response({"success": False}, status=503)
        return web.json_response(
            {
                "success": True,
                "data": {
                    "id": job["id"],
                    "custom_id": job["custom_id"],
                    "sitemap_id": job["sitemap_id"],
                    "sitemap_name": "sandbox-shop",
                    "status": job["status"],
                    "jobs_scheduled": len(job["start_urls"]),
                    "jobs_executed": len(job["start_urls"]) - len(job["problem_urls"]),
                    "jobs_failed": len(job["problem_urls"]),
                    "stored_record_count": len(job["rows"]),
                },
            }
        )

    async def data(request: web.Request) -> web.Response:
        job = job_for(request)
        if job is None:
            return web.json_response({"success": False}, status=404)
        job["downloads"] += 1
        rows = list(job["rows"])
        if job["status"] != "finished":
            rows = rows[: len(rows) // 2]  # a snapshot of a running job is partial
        if state.fire("start_on_download"):
            job["status"] = "started"
            spawn(run(job))
        body = "".join(json.dumps(row) + "\n" for row in rows)
        return web.Response(text=body, content_type="application/json")

    async def problems(request: web.Request) -> web.Response:
        job = job_for(request)
        if job is None:
            return web.json_response({"success": False}, status=404)
        return web.json_response({"success": True, "data": job["problem_urls"]})

    async def set_faults(request: web.Request) -> web.Response:
        state.faults.update({k: int(v) for k, v in (await request.json()).items()})
        return web.json_response(state.faults)

    async def sim_finish(request: web.Request) -> web.Response:
        job = state.jobs[int(request.match_info["job_id"])]
        job["held"] = False
        return web.json_response({"ok": True})

    async def sim_continue(request: web.Request) -> web.Response:
        job = state.jobs[int(request.match_info["job_id"])]
        body = await request.json() if request.can_read_body else {}
        spawn(run(job, int(body.get("rows", 1))))
        return web.json_response({"ok": True})

    async def sim_config(request: web.Request) -> web.Response:
        body = await request.json()
        if "webhook_url" in body:
            state.webhook_url = str(body["webhook_url"])
        return web.json_response({"ok": True})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "created": state.created,
                "notifications": state.notifications,
                "jobs": {
                    str(k): {
                        "status": j["status"],
                        "rows": len(j["rows"]),
                        "downloads": j["downloads"],
                        "start_urls": j["start_urls"],
                        "custom_id": j["custom_id"],
                    }
                    for k, j in state.jobs.items()
                },
            }
        )

    async def cancel_running(app: web.Application) -> None:
        for task in list(state.tasks):
            task.cancel()

    app.on_shutdown.append(cancel_running)
    app.router.add_post("/api/v1/scraping-job", create)
    app.router.add_get("/api/v1/scraping-job/{job_id}", status)
    app.router.add_get("/api/v1/scraping-job/{job_id}/json", data)
    app.router.add_get("/api/v1/scraping-job/{job_id}/problematic-urls", problems)
    app.router.add_post("/_sim/faults", set_faults)
    app.router.add_post("/_sim/finish/{job_id}", sim_finish)
    app.router.add_post("/_sim/continue/{job_id}", sim_continue)
    app.router.add_post("/_sim/config", sim_config)
    app.router.add_get("/_sim/stats", stats)
    return app
