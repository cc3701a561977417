"""Simulator of the Web Scraper Cloud API (the parts Salvage uses), on its documented contract.

- The API token travels as the `api_token` query parameter; a job or a sitemap belongs to its
  token's account and another account's token gets 404.
- Sitemaps: POST /api/v1/sitemap {the sitemap's JSON: _id, startUrl, selectors} ->
  {"success": true, "data": {"id": N}}; GET /api/v1/sitemap/{id} -> {"success": true, "data":
  {"id", "name", "sitemap": "<the sitemap's JSON as a string>"}}; PUT /api/v1/sitemap/{id}
  {the sitemap's JSON} -> {"success": true, "data": "ok"}; GET /api/v1/sitemaps ->
  {"success": true, "data": [{"id", "name"}], "current_page", "last_page", "total"}. A sitemap
  that does not validate (no `_id`, no start URL, a selector without id/type/parents, a parent
  that is neither `_root` nor a selector of the sitemap, a name already taken) is refused with
  400 {"success": false, "validationErrors": {field: [message]}}; nothing is stored.
- POST /api/v1/scraping-job {sitemap_id, start_urls, custom_id, ...}
  -> {"success": true, "data": {"id": N}}. There is no creation idempotency key. `start_urls`
  are one-time custom start URLs: they narrow this job only, the sitemap keeps its own; without
  them the job starts from the sitemap's startUrl. A sitemap_id the simulator never stored is
  taken as a sitemap made in the console ("sandbox-shop").
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
rows appear, and a new notification is sent. POST /_sim/end/{id} {"status": "failed" |
"stopped"} ends a running job that way. GET /_sim/stats counts jobs, notifications and
sitemaps.
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
        self.sitemaps: dict[int, dict[str, Any]] = {}  # id -> {"account", "name", "sitemap"}
        self.sitemap_writes = 0
        self._sitemap_ids = itertools.count(7001)
        self.created = 0
        self.notifications: list[dict[str, Any]] = []  # every POST attempt, with its answer
        self._ids = itertools.count(500)
        self.tasks: set[asyncio.Task] = set()


STATE = web.AppKey("state", State)


def sitemap_problems(doc: Any) -> dict[str, list[str]]:
    """What the service refuses in a sitemap, by field (empty: it validates)."""
    if not isinstance(doc, dict):
        return {"sitemap": ["The sitemap must be a JSON object."]}
    problems: dict[str, list[str]] = {}
    name = doc.get("_id")
    if not isinstance(name, str) or not name.strip():
        problems["_id"] = ["The sitemap name (_id) is required."]
    starts = doc.get("startUrl")
    starts = [starts] if isinstance(starts, str) else starts
    if (
        not isinstance(starts, list)
        or not starts
        or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in starts)
    ):
        problems["startUrl"] = ["At least one http(s) start URL is required."]
    selectors = doc.get("selectors")
    if not isinstance(selectors, list):
        problems["selectors"] = ["The selectors must be a list."]
        return problems
    ids = [s.get("id") for s in selectors if isinstance(s, dict)]
    for i, selector in enumerate(selectors):
        if not isinstance(selector, dict):
            problems.setdefault("selectors", []).append(f"Selector #{i} is not an object.")
            continue
        where = f"Selector {selector.get('id') or '#' + str(i)}"
        if not selector.get("id") or not selector.get("type"):
            problems.setdefault("selectors", []).append(f"{where} needs an id and a type.")
        parents = selector.get("parentSelectors")
        if not isinstance(parents, list) or not parents:
            problems.setdefault("selectors", []).append(f"{where} needs parentSelectors.")
            continue
        for parent in parents:
            if parent != "_root" and parent not in ids:
                problems.setdefault("selectors", []).append(
                    f"{where}: parent selector {parent!r} does not exist."
                )
    if len(ids) != len(set(ids)):
        problems.setdefault("selectors", []).append("Selector ids must be unique.")
    return problems


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
            "sitemap_name": job["sitemap_name"],
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
        if job.get("ended"):  # failed or stopped meanwhile (POST /_sim/end)
            spawn(notify(job, job["status"]))
            return
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
        stored = state.sitemaps.get(sitemap_id)
        if stored is not None and stored["account"] != who:
            stored = None
        if stored is not None:
            own = json.loads(stored["sitemap"]).get("startUrl")
            default_starts = [own] if isinstance(own, str) else list(own)
        else:
            default_starts = ["http://shop.test/"]
        job = {
            "id": job_id,
            "account": who,
            "sitemap_id": sitemap_id,
            "sitemap_name": stored["name"] if stored is not None else "sandbox-shop",
            "custom_id": str(body.get("custom_id") or ""),
            # One-time custom start URLs narrow this job only; the sitemap keeps its own.
            "start_urls": list(body.get("start_urls") or default_starts),
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
                    "sitemap_name": job["sitemap_name"],
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

    def refused(problems: dict[str, list[str]]) -> web.Response:
        return web.json_response({"success": False, "validationErrors": problems}, status=400)

    def sitemap_for(request: web.Request) -> dict[str, Any] | None:
        try:
            stored = state.sitemaps.get(int(request.match_info["sitemap_id"]))
        except ValueError:
            return None
        return stored if stored is not None and stored["account"] == account(request) else None

    async def read_sitemap(request: web.Request) -> Any:
        try:
            return await request.json()
        except ValueError:
            return None

    async def sitemap_create(request: web.Request) -> web.Response:
        who = account(request)
        if who is None:
            return denied()
        doc = await read_sitemap(request)
        problems = sitemap_problems(doc)
        if not problems and any(
            s["account"] == who and s["name"] == doc["_id"] for s in state.sitemaps.values()
        ):
            problems = {"_id": ["The sitemap name has already been taken."]}
        if problems:
            return refused(problems)
        sitemap_id = next(state._sitemap_ids)
        state.sitemaps[sitemap_id] = {
            "account": who,
            "name": doc["_id"],
            "sitemap": json.dumps(doc, separators=(",", ":")),
        }
        state.sitemap_writes += 1
        return web.json_response({"success": True, "data": {"id": sitemap_id}})

    async def sitemap_get(request: web.Request) -> web.Response:
        if account(request) is None:
            return denied()
        stored = sitemap_for(request)
        if stored is None:
            return web.json_response({"success": False, "error": "not found"}, status=404)
        sitemap_id = int(request.match_info["sitemap_id"])
        return web.json_response(
            {
                "success": True,
                "data": {"id": sitemap_id, "name": stored["name"], "sitemap": stored["sitemap"]},
            }
        )

    async def sitemap_update(request: web.Request) -> web.Response:
        who = account(request)
        if who is None:
            return denied()
        stored = sitemap_for(request)
        if stored is None:
            return web.json_response({"success": False, "error": "not found"}, status=404)
        doc = await read_sitemap(request)
        problems = sitemap_problems(doc)
        sitemap_id = int(request.match_info["sitemap_id"])
        if not problems and any(
            k != sitemap_id and s["account"] == who and s["name"] == doc["_id"]
            for k, s in state.sitemaps.items()
        ):
            problems = {"_id": ["The sitemap name has already been taken."]}
        if problems:
            return refused(problems)
        stored.update(name=doc["_id"], sitemap=json.dumps(doc, separators=(",", ":")))
        state.sitemap_writes += 1
        return web.json_response({"success": True, "data": "ok"})

    async def sitemap_list(request: web.Request) -> web.Response:
        who = account(request)
        if who is None:
            return denied()
        mine = [
            {"id": k, "name": s["name"]}
            for k, s in sorted(state.sitemaps.items())
            if s["account"] == who
        ]
        return web.json_response(
            {
                "success": True,
                "data": mine,
                "current_page": 1,
                "last_page": 1,
                "total": len(mine),
                "per_page": 100,
            }
        )

    async def sim_end(request: web.Request) -> web.Response:
        job = state.jobs[int(request.match_info["job_id"])]
        body = await request.json() if request.can_read_body else {}
        job["status"] = str(body.get("status", "failed"))
        job["ended"] = True
        job["held"] = False
        return web.json_response({"ok": True})

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
                "sitemap_writes": state.sitemap_writes,
                "sitemaps": {
                    str(k): {"name": s["name"], "sitemap": json.loads(s["sitemap"])}
                    for k, s in state.sitemaps.items()
                },
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
    app.router.add_post("/api/v1/sitemap", sitemap_create)
    app.router.add_get("/api/v1/sitemap/{sitemap_id}", sitemap_get)
    app.router.add_put("/api/v1/sitemap/{sitemap_id}", sitemap_update)
    app.router.add_get("/api/v1/sitemaps", sitemap_list)
    app.router.add_post("/api/v1/scraping-job", create)
    app.router.add_get("/api/v1/scraping-job/{job_id}", status)
    app.router.add_get("/api/v1/scraping-job/{job_id}/json", data)
    app.router.add_get("/api/v1/scraping-job/{job_id}/problematic-urls", problems)
    app.router.add_post("/_sim/faults", set_faults)
    app.router.add_post("/_sim/finish/{job_id}", sim_finish)
    app.router.add_post("/_sim/continue/{job_id}", sim_continue)
    app.router.add_post("/_sim/end/{job_id}", sim_end)
    app.router.add_post("/_sim/config", sim_config)
    app.router.add_get("/_sim/stats", stats)
    return app
