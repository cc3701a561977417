"""The sandbox's /robots.txt and its request log (for robots.txt tests and demos).

`install(app, robots)` serves `robots` at /robots.txt (default ALLOW_ALL, so the shop, the demo
and the drill fetch everything as before) and records every request's path, in order, in
`app[REQUESTS]`: the server's own word on what was fetched; `app[REQUEST_TIMES]` holds the same
requests as (time.time() on arrival, path), for tests of how often a host is asked. `robots`
may also be an int status (the robots.txt answers with that status), `"redirect:<path>"` (a
301 to that path, which then serves the text given as `app[REDIRECTED]`), or a list of those
answered in turn, the last one from then on (`[503, 503, RULES]`: unreachable twice, then
rules). `{origin}` in the text is the origin it is served from, so a test can list absolute
`Sitemap:` URLs (RFC 9309) on any port.
"""

from __future__ import annotations

import time
from collections import deque

from aiohttp import web

ALLOW_ALL = "User-agent: *\nAllow: /\n"

REQUESTS = web.AppKey("robots_requests", deque)
REQUEST_TIMES = web.AppKey("robots_request_times", deque)
LOG_SIZE = 500_000  # paths kept: a long demo or drill must not grow the log without bound
ROBOTS = web.AppKey("robots_txt", object)
REDIRECTED = web.AppKey("robots_redirected", str)


@web.middleware
async def log_requests(request: web.Request, handler):
    request.app[REQUESTS].append(request.path_qs)
    request.app[REQUEST_TIMES].append((time.time(), request.path_qs))
    return await handler(request)


async def robots_txt(request: web.Request) -> web.StreamResponse:
    robots = request.app[ROBOTS]
    if isinstance(robots, list):  # answered in turn, the last one from then on
        robots = robots.pop(0) if len(robots) > 1 else robots[0]
    if isinstance(robots, int):
        return web.Response(status=robots, text=f"status {robots}\n")
    if isinstance(robots, str) and robots.startswith("redirect:"):
        raise web.HTTPMovedPermanently(location=robots.removeprefix("redirect:"))
    origin = f"{request.scheme}://{request.host}"
    return web.Response(text=str(robots).replace("{origin}", origin), content_type="text/plain")


async def redirected(request: web.Request) -> web.Response:
    return web.Response(text=request.app[REDIRECTED], content_type="text/plain")


def install(
    app: web.Application, robots: str | int | list = ALLOW_ALL, redirect_text: str = ""
) -> None:
    """Serve /robots.txt on `app` (before it starts) and log every request's path."""
    app[REQUESTS] = deque(maxlen=LOG_SIZE)
    app[REQUEST_TIMES] = deque(maxlen=LOG_SIZE)
    app[ROBOTS] = list(robots) if isinstance(robots, list) else robots
    app[REDIRECTED] = redirect_text
    app.middlewares.append(log_requests)
    app.router.add_get("/robots.txt", robots_txt)
    if isinstance(robots, str) and robots.startswith("redirect:"):
        app.router.add_get(robots.removeprefix("redirect:"), redirected)
