"""The browser provider's forward proxy over real sockets, driven by a raw HTTP client.

Two loopback listeners on the same port number: 127.0.0.1 is allowed, 127.0.0.2 is not. A
name whose DNS answer changes between lookups (rebinding) must be connected to the address
that was checked, never to a later answer. Only the name's resolution is faked (no DNS
server exists here); sockets, the proxy and the guard are real.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from recovery.fetch.browser_proxy import GuardedProxy
from recovery.fetch.guard import AddressGuard
from tests.support.browser_provider import Listener


@pytest.fixture
def listeners():
    first = Listener("127.0.0.1")
    try:
        second = Listener("127.0.0.2", port=first.port)
    except OSError:
        first.close()
        pytest.skip("cannot bind 127.0.0.2 on this machine")
    yield first, second
    first.close()
    second.close()


async def _ask(proxy: GuardedProxy, head: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(head.encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 10)
    writer.close()
    return data


def _run(coro_fn, allowed: list[str]):
    async def go():
        proxy = GuardedProxy(AddressGuard.from_settings(allowed))
        await proxy.start()
        try:
            return await coro_fn(proxy), proxy
        finally:
            await proxy.close()

    return asyncio.run(go())


def test_a_name_is_connected_at_the_address_that_was_checked(listeners):
    allowed, forbidden = listeners
    answers = iter(["127.0.0.1"])  # then 127.0.0.2 for every later lookup: a rebinding DNS

    async def rebinding(proxy):
        loop = asyncio.get_running_loop()
        real = loop.getaddrinfo

        async def getaddrinfo(host, port, *args, **kwargs):
            if host != "rebind.test":
                return await real(host, port, *args, **kwargs)
            address = next(answers, "127.0.0.2")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

        loop.getaddrinfo = getaddrinfo
        return await _ask(
            proxy, f"GET http://rebind.test:{allowed.port}/x HTTP/1.1\r\nHost: rebind.test\r\n\r\n"
        )

    reply, proxy = _run(rebinding, [f"127.0.0.1:{allowed.port}"])
    assert reply.startswith(b"HTTP/1.1 200"), reply
    assert len(allowed.seen) == 1 and allowed.seen[0].startswith(b"GET /x HTTP/1.1")
    assert b"Connection: close" in allowed.seen[0]
    assert forbidden.seen == []
    assert proxy.refused == []


def test_it_refuses_a_forbidden_address_for_plain_requests_and_tunnels(listeners):
    allowed, forbidden = listeners

    async def both(proxy):
        plain = await _ask(
            proxy, f"GET http://127.0.0.2:{forbidden.port}/x HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        tunnel = await _ask(proxy, f"CONNECT 127.0.0.2:{forbidden.port} HTTP/1.1\r\n\r\n")
        spelled = await _ask(
            proxy, f"GET http://2130706434:{forbidden.port}/x HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        return plain, tunnel, spelled

    (plain, tunnel, spelled), proxy = _run(both, [f"127.0.0.1:{allowed.port}"])
    for reply in (plain, tunnel, spelled):
        assert reply.startswith(b"HTTP/1.1 403"), reply
    assert [r.method for r in proxy.refused] == ["GET", "CONNECT", "GET"]
    assert all("127.0.0.2" in r.reason for r in proxy.refused)
    assert forbidden.seen == [] and allowed.seen == []
