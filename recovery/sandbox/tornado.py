"""Simulator of seed 003's media-processing API (Tornado).

- POST /jobs {"source_url", "output": {"format", "preset"}} with X-API-Key -> 201
  {"job_id", "status": "queued"}. No idempotency key is documented, so none is honoured.
- GET /jobs/{id} -> {"job_id", "status": queued | processing | completed | failed | cancelled,
  "result": {"object_key", "url", "expires_at", "bytes", "format"}} for a completed job. The
  object key is stable; the URL is a signed link that expires after `url_ttl` seconds, and
  every lookup signs a fresh one for the *same* object (no re-processing).
- GET (or HEAD) /files/{object_key}?expires=&sig= -> the media bytes, 403 {"error": "expired"}
  after the link expired, 404 for an unknown object, 410 for one the store deleted.
- Another tenant's key gets 404 for a job, as for an unknown id.

Faults (counters, -1 = always; make_app(faults=...) or POST /_sim/faults): create_drop,
create_slow, create_429, status_5xx, status_429, status_404, hold (stay "processing" until
POST /_sim/release). POST /_sim/finish {"job_id", "status"} ends a job as failed or cancelled.
POST /_sim/lose {"object_key", "status": 404 | 410} loses a stored object (the job still
reports its result: a link to it then answers 404, or 410 Gone), the missing-file case.
GET /_sim/stats: {"created", "generations" (media actually produced), "file_downloads", ...}.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import time
from typing import Any

from aiohttp import web

from recovery.sandbox.switches import FaultSwitches

DEFAULT_KEYS = {"sandbox-tornado-key": "tenant-a", "sandbox-tornado-other": "tenant-b"}
_SIGNING = b"tornado-sandbox-signing-key"


class State(FaultSwitches):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.keys: dict[str, str] = dict(options.get("api_keys") or DEFAULT_KEYS)
        self.polls_to_finish = int(options.get("polls_to_finish", 1))
        self.url_ttl = float(options.get("url_ttl", 300.0))
        self.slow_seconds = float(options.get("slow_seconds", 5.0))
        self.jobs: dict[str, dict[str, Any]] = {}
        self.objects: dict[str, bytes] = {}
        self.gone: set[str] = set()  # objects deleted from the store: their links answer 410
        self.created = 0
        self.generations = 0
        self.file_downloads = 0
        self._ids = itertools.count(1)


STATE = web.AppKey("state", State)


def _sign(object_key: str, expires: int) -> str:
    return hmac.new(_SIGNING, f"{object_key}:{expires}".encode(), hashlib.sha256).hexdigest()[:32]


def make_app(**options: Any) -> web.Application:
    state = State(**options)
    app = web.Application()
    app[STATE] = state

    def tenant(request: web.Request) -> str | None:
        return state.keys.get(request.headers.get("X-API-Key", ""))

    def denied() -> web.Response:
        return web.json_response({"error": "invalid or missing X-API-Key"}, status=401)

    async def create(request: web.Request) -> web.StreamResponse:
        who = tenant(request)
        if who is None:
            return denied()
        if state.fire("create_429"):
            return web.json_response(
                {"error": "rate limited"}, status=429, headers={"Retry-After": state.retry_after()}
            )
        try:
            body = await request.json()
            source = str(body["source_url"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "source_url required"}, status=422)
        job_id = f"tj-{next(state._ids):04d}"
        state.created += 1
        output = body.get("output") or {}
        state.jobs[job_id] = {
            "tenant": who,
            "source_url": source,
            "format": str(output.get("format") or "mp4"),
            "status": "queued",
            "polls": 0,
            "held": state.fire("hold"),
        }
        if state.fire("create_drop"):
            request.transport.close()
            raise asyncio.CancelledError
        if state.fire("create_slow"):
            await asyncio.sleep(state.slow_seconds)
        return web.json_response({"job_id": job_id, "status": "queued"}, status=201)

    def result(request: web.Request, job_id: str, job: dict[str, Any]) -> dict[str, Any]:
        key = job["object_key"]
        expires = int(time.time() + state.url_ttl)
        base = str(request.url.origin()) + request.app.router["files"].url_for(object_key=key).path
        return {
            "object_key": key,
            "url": f"{base}?expires={expires}&sig={_sign(key, expires)}",
            "expires_at": expires,
            "bytes": job["bytes"],
            "format": job["format"],
        }

    async def job_status(request: web.Request) -> web.Response:
        who = tenant(request)
        if who is None:
            return denied()
        job_id = request.match_info["job_id"]
        job = state.jobs.get(job_id)
        if job is None or job["tenant"] != who or state.fire("status_404"):
            return web.json_response({"error": "job not found"}, status=404)
        if state.fire("status_429"):
            return web.json_response(
                {"error": "rate limited"}, status=429, headers={"Retry-After": state.retry_after()}
            )
        if state.fire("status_5xx"):
            return web.json_response({"error": "unavailable"}, status=503)
        job["polls"] += 1
        if job["status"] in ("queued", "processing"):
            job["status"] = "processing"
            if not job["held"] and job["polls"] > state.polls_to_finish:
                # The media is produced exactly once per job; lookups never redo it.
                key = f"media/{job_id}.{job['format']}"
                state.objects[key] = f"media from {job['source_url']}".encode()
                state.generations += 1
                job["object_key"] = key
                job["bytes"] = len(state.objects[key])
                job["status"] = "completed"
        answer: dict[str, Any] = {"job_id": job_id, "status": job["status"]}
        if job["status"] == "completed":
            answer["result"] = result(request, job_id, job)
        elif job["status"] in ("failed", "cancelled"):
            answer["error"] = job.get("error", job["status"])
        return web.json_response(answer)

    async def files(request: web.Request) -> web.Response:
        key = request.match_info["object_key"]
        try:
            expires = int(request.query.get("expires", "0"))
        except ValueError:
            expires = 0
        if not hmac.compare_digest(request.query.get("sig", ""), _sign(key, expires)):
            return web.json_response({"error": "bad signature"}, status=403)
        if expires < time.time():
            return web.json_response({"error": "expired"}, status=403)
        if key in state.gone:
            return web.json_response({"error": "object deleted"}, status=410)
        if key not in state.objects:
            return web.json_response({"error": "no such object"}, status=404)
        if request.method == "HEAD":
            return web.Response(
                content_type="application/octet-stream",
                headers={"Content-Length": str(len(state.objects[key]))},
            )
        state.file_downloads += 1
        return web.Response(body=state.objects[key], content_type="application/octet-stream")

    async def set_faults(request: web.Request) -> web.Response:
        state.faults.update({k: int(v) for k, v in (await request.json()).items()})
        return web.json_response(state.faults)

    async def release(request: web.Request) -> web.Response:
        for job in state.jobs.values():
            job["held"] = False
        return web.json_response({"ok": True})

    async def finish(request: web.Request) -> web.Response:
        body = await request.json()
        job = state.jobs[body["job_id"]]
        job["status"] = body.get("status", "failed")
        job["error"] = body.get("error", job["status"])
        return web.json_response({"ok": True})

    async def lose(request: web.Request) -> web.Response:
        body = await request.json()
        key = str(body["object_key"])
        state.objects.pop(key, None)
        if int(body.get("status", 404)) == 410:
            state.gone.add(key)
        return web.json_response({"ok": True})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "created": state.created,
                "generations": state.generations,
                "file_downloads": state.file_downloads,
                "jobs": {
                    k: {"status": j["status"], "polls": j["polls"]} for k, j in state.jobs.items()
                },
            }
        )

    app.router.add_post("/jobs", create)
    app.router.add_get("/jobs/{job_id}", job_status)
    app.router.add_get("/files/{object_key:.+}", files, name="files")
    app.router.add_post("/_sim/faults", set_faults)
    app.router.add_post("/_sim/release", release)
    app.router.add_post("/_sim/finish", finish)
    app.router.add_post("/_sim/lose", lose)
    app.router.add_get("/_sim/stats", stats)
    return app
