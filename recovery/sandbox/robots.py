"""The sandbox's /robots.txt and its request log (for robots.txt tests and demos).

`install(app, robots)` serves `robots` at /robots.txt (default ALLOW_ALL, so the shop, the demo
and the drill fetch everything as before) and records every request's path, in order, in
`app[REQUESTS]`: the server's own word on what was fetched. `robots` may also be an int status
(the robots.txt answers with that status) or `"redirect:<path>"` (a 301 to that path, which
then serves the text given as `app[REDIRECTED]`).
"""

from __future__ import annotations

from collections import deque

from aiohttp import web

ALLOW_ALL = "User-agent: *\nAllow: /\n"

REQUESTS = web.AppKey("robots_requests", deque)
LOG_SIZE = 500_000  # paths kept: a long demo or drill must not grow the log without bound
ROBOTS = web.AppKey("robots_txt", object)
REDIRECTED = web.AppKey("robots_redirected", str)


@web.middleware
async def log_requests(request: web.Request, handler):
    request.app[REQUESTS].append(request.path_qs)
    return await handler(request)


async def robots_txt(request: web.Request) -> web.StreamResponse:
    robots = request.app[ROBOTS]
    if isinstance(robots, int):
        return web.Response(status=robots, text=f"status {robots}\n")
    if isinstance(robots, str) and robots.startswith("redirect:"):
        raise web.HTTPMovedPermanently(location=robots.removeprefix("redirect:"))
    return web.Response(text=str(robots), content_type="text/plain")


async def redirected(request: web.Request) -> web.Response:
    return web.Response(text=request.app[REDIRECTED], content_type="text/plain")


def install(app: web.Application, robots: str | int = ALLOW_ALL, redirect_text: str = "") -> None:
    """Serve /robots.txt on `app` (before it starts) and log every request's path."""
    app[REQUESTS] = deque(maxlen=LOG_SIZE)
    app[ROBOTS] = robots
    app[REDIRECTED] = redirect_text
    app.middlewares.append(log_requests)
    app.router.add_get("/robots.txt", robots_txt)
    if isinstance(robots, str) and robots.startswith("redirect:"):
        app.router.add_get(robots.removeprefix("redirect:"), redirected)
