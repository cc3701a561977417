"""Serve an aiohttp application on a free loopback port in a background thread (for tests)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from aiohttp import web


@dataclass
class Served:
    base_url: str
    port: int
    _loop: asyncio.AbstractEventLoop
    _runner: web.AppRunner
    _thread: threading.Thread

    def stop(self) -> None:
        future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def start_in_thread(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> Served:
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    ready = threading.Event()
    box: dict = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, host, port)
        loop.run_until_complete(site.start())
        box["port"] = site._server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="sandbox", daemon=True)
    thread.start()
    if not ready.wait(timeout=10):
        raise RuntimeError("sandbox did not start within 10 s")
    bound = box["port"]
    return Served(f"http://{host}:{bound}", bound, loop, runner, thread)
