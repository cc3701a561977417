"""How many requests the sandbox has in flight per host, at most (for concurrency tests).

`install(app, hold)` counts each request from its arrival to its answer under its Host header
and keeps the largest count each host reached in `app[MAX_IN_FLIGHT]`: the server's own word
on how many requests a host had at once, whichever process sent them. `hold` seconds (default
0) are spent before each answer, so requests sent at about the same time overlap visibly; the
control endpoints (/_sandbox/...) are neither held nor counted.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

IN_FLIGHT = web.AppKey("in_flight", dict)
MAX_IN_FLIGHT = web.AppKey("max_in_flight", dict)
HOLD = web.AppKey("in_flight_hold", float)


@web.middleware
async def count_in_flight(request: web.Request, handler):
    if request.path.startswith("/_sandbox/"):
        return await handler(request)
    app = request.app
    host = request.host.lower()
    counts, peaks = app[IN_FLIGHT], app[MAX_IN_FLIGHT]
    # One event loop serves every request: no lock needed between these lines.
    counts[host] = counts.get(host, 0) + 1
    peaks[host] = max(peaks.get(host, 0), counts[host])
    try:
        if app[HOLD] > 0:
            await asyncio.sleep(app[HOLD])  # the page's latency, played
        return await handler(request)
    finally:
        counts[host] -= 1


def install(app: web.Application, hold: float = 0.0) -> None:
    """Count requests in flight per host on `app` (before it starts)."""
    app[IN_FLIGHT] = {}
    app[MAX_IN_FLIGHT] = {}
    app[HOLD] = hold
    app.middlewares.append(count_in_flight)
