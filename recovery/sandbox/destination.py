"""Sandbox delivery destination: an importer keyed by idempotency key, with faults.

    PUT/POST /events/{key}       store the JSON body under key (or POST /import with an
                                 Idempotency-Key header)
    GET      /events/{key}       200 with the stored body, 404 if the key never arrived
    GET      /events             {"keys": [...], "records": n}
    GET      /_stats             request counts per key (puts, lookups)
    POST     /_faults            {"slow_after_write": n, "error_5xx": n, "drop": n} arms faults
                                 for the next n writes

Faults (each counts down per write request):
- slow_after_write: store the record, then hold the answer for `slow_seconds`: the client
  times out after the write happened (an uncertain write).
- error_5xx: answer 503 without storing.
- drop: close the connection without storing or answering.

`idempotent=True` (default) makes a repeated key a no-op answered 200; `idempotent=False`
plays a naive importer that appends every write, so a sender that resends an uncertain write
without looking it up first creates a visible duplicate (what the outbox tests check).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

FAULTS = ("slow_after_write", "error_5xx", "drop")


@dataclass
class DestinationState:
    idempotent: bool = True
    slow_seconds: float = 5.0
    faults: Counter = field(default_factory=Counter)
    records: list[tuple[str, Any]] = field(default_factory=list)  # (key, body) in arrival order
    by_key: dict[str, Any] = field(default_factory=dict)
    puts: Counter = field(default_factory=Counter)
    lookups: Counter = field(default_factory=Counter)

    def arm(self, **counts: int) -> None:
        for name, n in counts.items():
            if name not in FAULTS:
                raise ValueError(f"unknown destination fault {name!r}")
            self.faults[name] = int(n)

    def _take(self, name: str) -> bool:
        if self.faults[name] > 0:
            self.faults[name] -= 1
            return True
        return False

    def records_for(self, key: str) -> int:
        return sum(1 for k, _b in self.records if k == key)


STATE_KEY = web.AppKey("destination_state", DestinationState)


async def _write(request: web.Request, key: str) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    state.puts[key] += 1
    if not key:
        return web.json_response({"error": "an idempotency key is required"}, status=400)
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": "body is not JSON"}, status=400)
    if state._take("error_5xx"):
        return web.json_response({"error": "simulated outage"}, status=503)
    if state._take("drop"):
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError  # aiohttp drops the connection without an answer
    duplicate = key in state.by_key
    if not duplicate or not state.idempotent:
        state.records.append((key, body))
        state.by_key[key] = body
    if state._take("slow_after_write"):
        await asyncio.sleep(state.slow_seconds)  # stored, but the client gives up first
    return web.json_response({"key": key, "duplicate": duplicate}, status=200 if duplicate else 201)


async def put_event(request: web.Request) -> web.StreamResponse:
    return await _write(request, request.match_info["key"])


async def post_import(request: web.Request) -> web.StreamResponse:
    return await _write(request, request.headers.get("Idempotency-Key", ""))


async def get_event(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    key = request.match_info["key"]
    state.lookups[key] += 1
    if key not in state.by_key:
        return web.json_response({"error": "not found"}, status=404)
    return web.json_response({"key": key, "body": state.by_key[key]})


async def list_events(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    return web.json_response({"keys": list(state.by_key), "records": len(state.records)})


async def stats(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    return web.json_response(
        {"puts": dict(state.puts), "lookups": dict(state.lookups), "faults": dict(state.faults)}
    )


async def set_faults(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    try:
        state.arm(**(await request.json()))
    except (ValueError, TypeError, json.JSONDecodeError) as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return web.json_response({"faults": dict(state.faults)})


def make_app(
    *,
    idempotent: bool = True,
    slow_seconds: float = 5.0,
    faults: dict[str, int] | None = None,
    **_ignored: Any,
) -> web.Application:
    app = web.Application()
    state = DestinationState(idempotent=idempotent, slow_seconds=slow_seconds)
    state.arm(**(faults or {}))
    app[STATE_KEY] = state
    app.router.add_put("/events/{key}", put_event)
    app.router.add_post("/events/{key}", put_event)
    app.router.add_post("/import", post_import)
    app.router.add_get("/events/{key}", get_event)
    app.router.add_get("/events", list_events)
    app.router.add_get("/_stats", stats)
    app.router.add_post("/_faults", set_faults)
    return app
