"""Sandbox fixtures: the shop over real sockets, in a thread or in its own process.

- `sandbox`: one shared in-thread server per session (200 pages, seed 0, profile "every", so
  every fault kind is present); its state (transient-fault counters, inserted items, fault
  switches) is reset before each test.
- `make_sandbox(**options)`: a fresh in-thread server with your own options, stopped after
  the test.
- `sandbox_process(*args)`: `manage.py sandbox --port 0 ...` in a real subprocess, stopped with
  SIGTERM after the test (for tests that need the server outside the test process).

Each yields a `SandboxHandle`: `base_url`, `url(path)`, and the shop's fault lookups
(`fault(i)`, `expected(i)`, `products_with(kind)`, `summary()`), which are the same functions
the server uses, so expected outcomes are computed, never hard-coded.
"""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from recovery.sandbox import server, site
from recovery.sandbox.runner import Served, start_in_thread

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS: dict[str, Any] = {"pages": 200, "seed": 0, "faults": "every"}
_LISTENING = re.compile(r"sandbox listening on (http://\S+?)/? ")


@dataclass
class SandboxHandle:
    base_url: str
    pages: int
    seed: int
    profile: str
    served: Served | None = None
    shop: site.Shop | None = None  # None when the server runs in another process
    process: subprocess.Popen | None = None
    files: dict[str, Path] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.base_url + path

    def product_url(self, i: int) -> str:
        return f"{self.base_url}/product/{i}"

    def retailer_product_url(self, i: int) -> str:
        """Product i on its retailer's own host (needs make_sandbox(retailer_hosts=True))."""
        host = site.retailer_host(site.retailer_for(i, seed=self.seed))
        return f"http://{host}:{self.base_url.rsplit(':', 1)[1]}/product/{i}"

    def current_profile(self) -> str:
        """The profile in force (a test may switch it through POST /_sandbox/faults)."""
        return self.shop.state.profile if self.shop is not None else self.profile

    def fault(self, i: int) -> str:
        return site.fault_for(i, seed=self.seed, profile=self.current_profile())

    def expected(self, i: int, bad_retailer: bool | None = None) -> site.Expected:
        if bad_retailer is None and self.shop is not None:
            bad_retailer = self.shop.state.bad_retailer
        return site.expected(
            i, seed=self.seed, profile=self.current_profile(), bad_retailer=bad_retailer
        )

    def products_with(self, kind: str) -> list[int]:
        return [i for i in range(1, self.pages + 1) if self.fault(i) == kind]

    def summary(self, bad_retailer: bool | None = None) -> dict[str, Any]:
        if bad_retailer is None and self.shop is not None:
            bad_retailer = self.shop.state.bad_retailer
        return site.expected_summary(
            self.pages, seed=self.seed, profile=self.current_profile(), bad_retailer=bad_retailer
        )

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the server's event loop (the shop's state belongs to that thread)."""
        assert self.served is not None, "only for in-thread sandboxes"

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.served._loop).result(timeout=10)


def start_sandbox(**options: Any) -> SandboxHandle:
    """Serve build_app(**options) on a free loopback port in a background thread."""
    options = {**DEFAULTS, **options}
    retailer_hosts = options.pop("retailer_hosts", False)
    app = server.build_app(**options)
    served = start_in_thread(app)
    if retailer_hosts:  # also 127.0.0.2-6, one per retailer, same port
        asyncio.run_coroutine_threadsafe(
            server.listen_on_retailer_hosts(served._runner, served.port), served._loop
        ).result(timeout=10)
    return SandboxHandle(
        base_url=served.base_url,
        pages=options["pages"],
        seed=options["seed"],
        profile=options["faults"],
        served=served,
        shop=app[site.SHOP_KEY],
    )


@pytest.fixture(scope="session")
def _shared_sandbox() -> Iterator[SandboxHandle]:
    handle = start_sandbox()
    yield handle
    assert handle.served is not None
    handle.served.stop()


@pytest.fixture
def sandbox(_shared_sandbox: SandboxHandle) -> SandboxHandle:
    handle = _shared_sandbox
    shop = handle.shop
    assert shop is not None

    def restore() -> None:
        shop.reset()
        shop.set_profile(DEFAULTS["faults"])
        shop.state.bad_retailer = False

    handle.call(restore)
    return handle


@pytest.fixture
def make_sandbox() -> Iterator[Callable[..., SandboxHandle]]:
    started: list[SandboxHandle] = []

    def make(**options: Any) -> SandboxHandle:
        handle = start_sandbox(**options)
        started.append(handle)
        return handle

    yield make
    for handle in started:
        assert handle.served is not None
        handle.served.stop()


def start_sandbox_process(
    *args: str, pages: int = 200, seed: int = 0, faults: str = "every", deadline: float = 30.0
) -> SandboxHandle:
    """`manage.py sandbox --port 0` in a subprocess; returns once it prints its URL."""
    cmd = [
        sys.executable,
        str(ROOT / "manage.py"),
        "sandbox",
        "--port",
        "0",
        "--pages",
        str(pages),
        "--seed",
        str(seed),
        "--faults",
        faults,
        *args,
    ]
    env = {**os.environ, "SALVAGE_INSECURE_DEV_KEY": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # manage.py's own default, like an operator
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output: list[str] = []
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if not sel.select(timeout=max(0.0, end - time.monotonic())):
                continue
            line = proc.stdout.readline()
            if not line:  # the process exited before listening
                break
            output.append(line)
            match = _LISTENING.search(line)
            if match:
                return SandboxHandle(
                    base_url=match.group(1),
                    pages=pages,
                    seed=seed,
                    profile=faults,
                    process=proc,
                )
    stop_process(proc)
    raise RuntimeError(f"sandbox process did not start within {deadline}s:\n{''.join(output)}")


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    if proc.stdout is not None:
        proc.stdout.close()
    return proc.returncode


@pytest.fixture
def sandbox_process() -> Iterator[Callable[..., SandboxHandle]]:
    """A factory: sandbox_process("--spec-out", path, pages=50) -> a running handle."""
    started: list[SandboxHandle] = []

    def start(*args: str, **kwargs: Any) -> SandboxHandle:
        handle = start_sandbox_process(*args, **kwargs)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        assert handle.process is not None
        stop_process(handle.process)
