"""Specs, inputs and a listener for the browser provider's tests (sandbox pages at /js/)."""

from __future__ import annotations

import asyncio
import copy
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from recovery.outcomes import Outcome, TaskInput
from recovery.providers.browser import BrowserProvider

CHROMIUM = os.environ.get("SALVAGE_CHROMIUM", "/usr/bin/chromium")
# The product fields the sandbox inserts by script: the direct provider's own spec.
BROWSER_SPEC: dict[str, Any] = {
    "name": "jsshop",
    "provider": "browser",
    "max_attempts": 3,
    "entity_key": {"field": "sku"},
    "partition": {"rule": "host"},
    "provider_options": {"wait_for": "div.product .price", "wait_timeout": 5.0, "deadline": 15.0},
    "default_page_type": "product",
    "page_types": {
        "product": {
            "expect": {"selector": "div.product"},
            "empty_shell": {"min_text_chars": 40},
            "fields": {
                "title": {"selector": "div.product h1", "required": True},
                "price": {"selector": ".price", "type": "decimal", "required": True},
                "sku": {"selector": "[data-sku]", "attr": "data-sku", "required": True},
                "in_stock": {"selector": ".stock", "attr": "data-in-stock", "type": "bool"},
                "reviews": {"selector": ".reviews", "type": "int"},
                "retailer": {"selector": "[data-retailer]", "attr": "data-retailer"},
            },
        },
        "listing": {
            "expect": {"selector": "ul.listing"},
            "links": {"selector": "a.product-link", "page_type": "product", "max_depth": 1},
        },
    },
}


def need_chromium() -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide Chromium at {CHROMIUM} (.ci/run installs it)")
        pytest.skip(f"needs Chromium at {CHROMIUM}: apt-get install chromium")


def browser_spec(**options: Any) -> dict[str, Any]:
    from recovery.intake import specs

    raw = copy.deepcopy(BROWSER_SPEC)
    raw["provider_options"].update(options)
    return specs.validate(raw)


def task_input(url: str, spec: dict[str, Any], page_type: str = "product") -> TaskInput:
    return TaskInput(
        task_id=1,
        task_key="k",
        run_id=1,
        url=url,
        page_type=page_type,
        partition="p",
        window="w",
        dataset=spec["name"],
        attempt_count=1,
        lease_token=1,
        spec=spec,
    )


def render(urls: list[str], page_type: str = "product", **options: Any) -> list[Outcome]:
    """Run the provider on its own event loop, then close it as the worker does (this loop's
    Chromium and its robots.txt client)."""
    spec = browser_spec(**options)

    async def go() -> list[Outcome]:
        provider = BrowserProvider(**spec["provider_options"])
        try:
            return await provider.execute_many([task_input(u, spec, page_type) for u in urls])
        finally:
            await provider.aclose()

    return asyncio.run(go())


class Listener:
    """A TCP listener that records every connection it accepts (and answers 200)."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.seen.append(conn.recv(4096) or b"(connected)")
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                except OSError:
                    self.seen.append(b"(connected)")

    def close(self) -> None:
        self.sock.close()


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    """A valid PNG image (grey pixels), built by hand."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def screenshot_attempt(task, png: bytes | None = None, **artefact: Any):
    """A quarantined attempt of `task` whose artefact names a stored screenshot."""
    from recovery import failures
    from recovery.fetch import artefacts
    from recovery.models import Attempt

    name = artefacts.store(png if png is not None else tiny_png(), "png")
    body = {"status": 200, "reason": "expected template not found", "screenshot": name}
    body.update(artefact)
    return Attempt.objects.create(
        task=task,
        run=task.run,
        outcome="quarantined",
        error_class="wrong_template",
        error_detail="expected template not found: selector 'div.product'",
        artefact=failures.sanitise_artefact(body),
    )
