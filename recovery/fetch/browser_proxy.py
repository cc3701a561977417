"""The forward proxy every request of the browser provider goes through (outbound safety).

Chromium runs with each task's context pointed at its own `GuardedProxy` listener on
127.0.0.1 (Playwright forces `<-loopback>` into the bypass list, so loopback targets are
proxied too). The proxy is the only way out, and it applies the direct provider's address
policy (`recovery.fetch.guard.AddressGuard`) to every request the page makes: the document, each
redirect hop (Chromium sends every hop as a new proxied request), scripts' fetch/XHR,
images and other subresources, and WebSockets (Chromium opens `ws://` and `wss://` through a
CONNECT tunnel). For each request it:

1. reads the target host and port (absolute-form `GET http://host:port/...`, or
   `CONNECT host:port` for HTTPS and WebSockets);
2. resolves and checks it with the guard (numeric spellings normalised, non-global addresses
   refused unless allow-listed);
3. connects to the checked address itself, so a second DNS answer can never be used
   (no rebinding between check and connect), and relays bytes.

A refused request gets a 403 from the proxy and is recorded in `refused` (the provider logs
it on the attempt; a refused document is `blocked_url`). Chromium never resolves names when a
proxy is set, so the page cannot learn or reach an address the guard did not approve.

Why a proxy and not `--host-resolver-rules`: resolver rules pin names, but cannot refuse an
IP literal in a script's fetch, a redirect to one, or a WebSocket, and must be fixed at launch
for the whole browser; the proxy sees every connection, per task, with the same code path as
direct fetching. Its cost is measured by `make bench-browser` (bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from recovery.fetch.errors import BlockedURL, FetchError
from recovery.fetch.guard import AddressGuard

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
_HOP_HEADERS = frozenset(
    {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}
)


@dataclass(slots=True)
class Refusal:
    method: str
    target: str  # the URL or host:port asked for
    reason: str


@dataclass
class GuardedProxy:
    """One listener on 127.0.0.1 for one task's browser context."""

    guard: AddressGuard
    refused: list[Refusal] = field(default_factory=list)
    requests: int = 0
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task] = field(default_factory=set)

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:  # one bad connection must not take the listener down
            log.exception("browser proxy: connection failed")
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await _reply(writer, 431, "request head too large")
            return
        if len(head) > MAX_HEAD_BYTES:
            await _reply(writer, 431, "request head too large")
            return
        request_line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ", 2)
        except ValueError:
            await _reply(writer, 400, "bad request line")
            return
        self.requests += 1
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port = int(port_text) if port_text.isdigit() else 443
            shown = target
        else:
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                self._refuse(method, target, f"scheme {parts.scheme!r} is not proxied")
                await _reply(writer, 403, "refused by outbound safety")
                return
            host, port, shown = parts.hostname, parts.port or 80, target
        host = host.strip("[]")
        try:
            addresses = await self.guard.resolve(host, port)
            upstream_reader, upstream_writer = await self._connect(addresses, port)
        except BlockedURL as exc:
            self._refuse(method, shown, exc.detail)
            await _reply(writer, 403, "refused by outbound safety")
            return
        except (FetchError, OSError, TimeoutError) as exc:
            detail = exc.detail if isinstance(exc, FetchError) else f"{type(exc).__name__}: {exc}"
            await _reply(writer, 502, detail[:200])
            return
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                parts = urlsplit(target)
                path = parts.path or "/"
                if parts.query:
                    path += "?" + parts.query
                upstream_writer.write(_origin_request(method, path, version, rest))
                await upstream_writer.drain()
            await _pipe_both(reader, writer, upstream_reader, upstream_writer)
        finally:
            upstream_writer.close()

    async def _connect(self, addresses, port: int):
        last: Exception | None = None
        for _family, ip in addresses:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    # The checked IP itself: never the name, which could resolve differently.
                    return await asyncio.open_connection(ip, port)
            except (OSError, TimeoutError) as exc:
                last = exc
        assert last is not None
        raise last

    def _refuse(self, method: str, target: str, reason: str) -> None:
        self.refused.append(Refusal(method, target[:500], reason[:500]))


def _origin_request(method: str, path: str, version: str, rest: bytes) -> bytes:
    """The request as an origin server expects it: origin-form target, no proxy headers, and
    `Connection: close` so the response ends with the upstream connection (each proxied
    request has its own, checked connection)."""
    lines = [f"{method} {path} {version}".encode("latin-1")]
    for line in rest.split(b"\r\n"):
        if not line:
            continue
        name = line.split(b":", 1)[0].strip().lower()
        if name not in _HOP_HEADERS:
            lines.append(line)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while True:
            chunk = await src.read(65536)
            if not chunk:
                break
            dst.write(chunk)
            await dst.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if dst.can_write_eof():
                dst.write_eof()


async def _pipe_both(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    upward = asyncio.ensure_future(_pipe(client_reader, upstream_writer))
    try:
        # The exchange is over when the upstream side has said everything.
        await _pipe(upstream_reader, client_writer)
    finally:
        upward.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await upward


async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 431: "Too Large", 502: "Bad Gateway"}
    body = text.encode("utf-8", "replace")
    writer.write(
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()
