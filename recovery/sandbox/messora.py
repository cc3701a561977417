"""Simulator of seed 000's asynchronous scraping API (POST /batch, /crawl, /search; GET /jobs/{id}).

Jobs live in memory and belong to the tenant of the X-API-Key that created them; another
tenant's key gets 404, as the real API answers. A job finishes after `polls_to_finish` status
checks (or never while it is held). Faults are counters set through `make_app(faults=...)` or
POST /_sim/faults (each fires that many times; -1 = always):

- create_drop: create the job, then drop the connection without answering
- create_slow: create the job, then answer after `slow_seconds` (past the client timeout)
- create_429 / status_429: 429 with Retry-After (alternating delta-seconds and HTTP-date)
- status_5xx: 503 on a status check
- status_404: 404 on a status check as if the job were unknown
- partial: the next finished batch job reports mixed per-item statuses
  (`partial_statuses`, cycled over the URLs)
- token_cap: the next search job stops early with stopped_reason "token_cap"
- hold: new jobs stay PENDING until POST /_sim/release

GET /_sim/stats returns {"created": n, "jobs": {...}, "status_calls": n} so tests can prove
that nothing was submitted twice.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from aiohttp import web

from recovery.sandbox.switches import FaultSwitches

DEFAULT_KEYS = {"sandbox-messora-key": "tenant-a", "sandbox-messora-other": "tenant-b"}
PARTIAL = ("success", "timeout", "blocked_antibot", "extraction_failed")


class State(FaultSwitches):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.keys: dict[str, str] = dict(options.get("api_keys") or DEFAULT_KEYS)
        self.polls_to_finish = int(options.get("polls_to_finish", 1))
        self.slow_seconds = float(options.get("slow_seconds", 5.0))
        self.partial_statuses = tuple(options.get("partial_statuses") or PARTIAL)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.created = 0
        self.status_calls = 0
        self._ids = itertools.count(1)


STATE = web.AppKey("state", State)


def _tenant(request: web.Request, state: State) -> str | None:
    return state.keys.get(request.headers.get("X-API-Key", ""))


def _unauthorised() -> web.Response:
    return web.json_response({"error": "invalid or missing X-API-Key"}, status=401)


def _results(state: State, job: dict[str, Any]) -> tuple[list[dict], str]:
    kind, body = job["kind"], job["body"]
    if kind == "batch":
        urls = list(body.get("urls") or [])
    elif kind == "crawl":
        start = str(body.get("url"))
        limit = int(body.get("limit") or 5)
        urls = [start] + [f"{start.rstrip('/')}/page-{i}" for i in range(1, limit)]
    else:
        query = str(body.get("query"))
        limit = int(body.get("limit") or 5)
        urls = [f"https://search.example/{query}/{i}" for i in range(limit)]
    stopped = ""
    if kind == "search" and job["token_cap"]:
        urls, stopped = urls[: max(1, len(urls) // 2)], "token_cap"
    out = []
    for i, url in enumerate(urls):
        status = (
            state.partial_statuses[i % len(state.partial_statuses)] if job["partial"] else "success"
        )
        entry: dict[str, Any] = {"url": url, "scrape_status": status}
        if status == "success":
            entry["markdown"] = f"# Page {i}\n\nContent of {url}"
            entry["title"] = f"Page {i}"
        out.append(entry)
    return out, stopped


def make_app(**options: Any) -> web.Application:
    state = State(**options)
    app = web.Application()
    app[STATE] = state

    async def create(request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        tenant = _tenant(request, state)
        if tenant is None:
            return _unauthorised()
        if state.fire("create_429"):
            return web.json_response(
                {"error": "rate limited"}, status=429, headers={"Retry-After": state.retry_after()}
            )
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "body must be JSON"}, status=400)
        if kind == "batch" and not body.get("urls"):
            return web.json_response({"error": "urls required"}, status=422)
        job_id = f"job-{next(state._ids):05d}"
        state.created += 1
        state.jobs[job_id] = {
            "tenant": tenant,
            "kind": kind,
            "body": body,
            "polls": 0,
            "held": state.fire("hold"),
            "partial": kind == "batch" and state.fire("partial"),
            "token_cap": kind == "search" and state.fire("token_cap"),
            "status": "PENDING",
        }
        if state.fire("create_drop"):
            # Accepted, then the connection dies before any answer: the client cannot know.
            request.transport.close()
            raise asyncio.CancelledError
        if state.fire("create_slow"):
            await asyncio.sleep(state.slow_seconds)
        return web.json_response({"job_id": job_id, "status": "PENDING"}, status=202)

    async def job_status(request: web.Request) -> web.Response:
        state.status_calls += 1
        tenant = _tenant(request, state)
        if tenant is None:
            return _unauthorised()
        job = state.jobs.get(request.match_info["job_id"])
        if job is None or job["tenant"] != tenant or state.fire("status_404"):
            return web.json_response({"error": "job not found"}, status=404)
        if state.fire("status_429"):
            return web.json_response(
                {"error": "rate limited"}, status=429, headers={"Retry-After": state.retry_after()}
            )
        if state.fire("status_5xx"):
            return web.json_response({"error": "unavailable"}, status=503)
        job["polls"] += 1
        if job["status"] == "PENDING" and not job["held"] and job["polls"] > state.polls_to_finish:
            job["results"], job["stopped_reason"] = _results(state, job)
            job["status"] = "SUCCESS"
        answer: dict[str, Any] = {"job_id": request.match_info["job_id"], "status": job["status"]}
        if job["status"] == "SUCCESS":
            answer["results"] = job["results"]
            answer["credits_used"] = len(job["results"])
            if job["stopped_reason"]:
                answer["stopped_reason"] = job["stopped_reason"]
        elif job["status"] in ("FAILURE", "REVOKED"):
            answer["error"] = job.get("error", job["status"])
        return web.json_response(answer)

    async def set_faults(request: web.Request) -> web.Response:
        body = await request.json()
        state.faults.update({k: int(v) for k, v in body.items()})
        return web.json_response(state.faults)

    async def release(request: web.Request) -> web.Response:
        for job in state.jobs.values():
            job["held"] = False
        return web.json_response({"released": len(state.jobs)})

    async def finish(request: web.Request) -> web.Response:
        # Test control: end a job as FAILURE or REVOKED.
        body = await request.json()
        job = state.jobs[body["job_id"]]
        job["status"] = body.get("status", "FAILURE")
        job["error"] = body.get("error", job["status"])
        return web.json_response({"ok": True})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "created": state.created,
                "status_calls": state.status_calls,
                "jobs": {
                    k: {"kind": j["kind"], "status": j["status"], "polls": j["polls"]}
                    for k, j in state.jobs.items()
                },
            }
        )

    app.router.add_post("/{kind:batch|crawl|search}", create)
    app.router.add_get("/jobs/{job_id}", job_status)
    app.router.add_post("/_sim/faults", set_faults)
    app.router.add_post("/_sim/release", release)
    app.router.add_post("/_sim/finish", finish)
    app.router.add_get("/_sim/stats", stats)
    return app
