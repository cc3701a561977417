"""A TCP proxy (on loopback unless told) that delays every byte by a fixed time in each direction.

What a worker on another machine sees of PostgreSQL: each round trip costs twice the delay
(e.g. 1 ms each way, a host in the same zone; 10 ms, another zone or region). Bandwidth is
not limited and order is kept: each chunk read is written `delay` seconds after it arrived,
chunks queued behind each other, so a pipelined burst pays the delay once, as on a real link.

Runs its own asyncio loop in a thread of the process that starts it:

    with DelayProxy(("127.0.0.1", 5432), delay=0.001) as proxy:
        url = f"postgres://postgres@127.0.0.1:{proxy.port}/mydb"
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class DelayProxy:
    def __init__(self, upstream: tuple[str, int], delay: float, host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.delay = delay
        self.host = host  # the address it listens on (bench/netns.py: the host end of a veth)
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(timeout=10)
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        # Cancelled by close(): end quietly (asyncio's stream callback reports a cancelled task).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                self._pump(client_r, server_w),
                self._pump(server_r, client_w),
                return_exceptions=True,
            )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            try:
                while data := await reader.read(1 << 16):
                    queue.put_nowait((loop.time() + self.delay, data))
            finally:
                queue.put_nowait((0.0, b""))  # end of stream, after what was read

        async def write() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            with contextlib.suppress(OSError):
                writer.close()

        await asyncio.gather(read(), write(), return_exceptions=True)

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
