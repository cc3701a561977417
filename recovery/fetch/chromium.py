"""The worker's one Chromium: launched through Playwright, never outliving the worker.

Playwright runs a Node.js driver, which starts Chromium in a process group of its own
(`detached`), so killing the worker's group would not reach it; and although each exits when
its pipe closes, a hung Chromium never reads its pipe and the driver waits for it, so a
SIGKILLed worker would leave both behind. Both are therefore started through a tiny exec
wrapper that sets a parent-death signal (`PR_SET_PDEATHSIG = SIGKILL`) before exec: when the
worker dies the kernel kills the driver, whose death kills Chromium; Chromium's helper
processes exit when their browser process is gone. The wrapper costs one interpreter start
per launch.

One `Chromium` per worker process and event loop (`shared()`): one browser, and each task
opens its own context in it. A crashed or disconnected browser is relaunched on next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    # Outbound safety: WebRTC would send UDP around the proxy; QUIC is never proxied; DNS
    # prefetch would resolve names the guard has not seen.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-quic",
    "--dns-prefetch-disable",
)

_WRAPPER = """#!{python} -S
# Exec wrapper written by recovery.fetch.chromium: die with the parent (PR_SET_PDEATHSIG).
import ctypes, os, signal, sys
parent = os.getppid()
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
if os.getppid() != parent:  # the parent died before the signal was armed
    sys.exit(1)
if {pidfile!r}:
    with open({pidfile!r}, "w") as fh:
        fh.write(str(os.getpid()))
os.execv({target!r}, [{target!r}, *sys.argv[1:]])
"""


class BrowserMissing(RuntimeError):
    """Playwright or Chromium is not installed: the message says what to install."""


def _wrapper(target: str, directory: Path, pidfile: str = "") -> str:
    path = directory / (Path(target).name + "-pdeathsig")
    if not path.exists():
        path.write_text(_WRAPPER.format(python=sys.executable, target=target, pidfile=pidfile))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


class Chromium:
    """Playwright's driver and one Chromium, started on first use in the running loop."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self._playwright: Any = None
        self._browser: Any = None
        self._lock: asyncio.Lock | None = None
        _sweep_dead_dirs()
        self._dir = Path(tempfile.mkdtemp(prefix=f"salvage-chromium-{os.getpid()}-"))
        self.pidfile = self._dir / "chromium.pid"
        self.launches = 0

    async def browser(self):
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            await self._start()
            return self._browser

    async def _start(self) -> None:
        try:
            from playwright._impl._driver import compute_driver_executable
            from playwright.async_api import async_playwright
        except ImportError:
            raise BrowserMissing(
                "the browser provider needs Playwright: pip install 'salvage[browser]' "
                "(make install does this) and Debian's chromium package"
            ) from None
        if not os.access(self.executable, os.X_OK):
            raise BrowserMissing(
                f"no Chromium at {self.executable} (SALVAGE_CHROMIUM): apt-get install chromium"
            )
        await self._stop()
        self._dir.mkdir(exist_ok=True)  # removed by close(); the wrappers are written again
        if self._playwright is None:
            node, _cli = compute_driver_executable()
            # The driver dies with this process (read once, when the driver starts).
            previous = os.environ.get("PLAYWRIGHT_NODEJS_PATH")
            os.environ["PLAYWRIGHT_NODEJS_PATH"] = _wrapper(node, self._dir)
            try:
                self._playwright = await async_playwright().start()
            finally:
                if previous is None:
                    os.environ.pop("PLAYWRIGHT_NODEJS_PATH", None)
                else:
                    os.environ["PLAYWRIGHT_NODEJS_PATH"] = previous
        self._browser = await self._playwright.chromium.launch(
            executable_path=_wrapper(self.executable, self._dir, str(self.pidfile)),
            args=list(CHROMIUM_ARGS),
            # A global proxy that answers nothing: a context without its own proxy (there is
            # none in this module, but a future one) could still never go direct.
            proxy={"server": "http://127.0.0.1:9"},
            handle_sigint=False,
            handle_sigterm=False,
            handle_sighup=False,
        )
        self.launches += 1

    async def restart(self) -> None:
        """Drop a browser that stopped answering; the next task launches a new one."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._stop()

    async def _stop(self) -> None:
        browser, self._browser = self._browser, None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), 5)
            except Exception:  # already gone, or hung: make sure of it
                self.kill()

    def kill(self) -> None:
        """SIGKILL the browser process (the wrapper wrote its pid, which exec kept)."""
        try:
            pid = int(self.pidfile.read_text())
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass

    async def close(self) -> None:
        await self._stop()
        playwright, self._playwright = self._playwright, None
        if playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(playwright.stop(), 10)
        shutil.rmtree(self._dir, ignore_errors=True)


def _sweep_dead_dirs() -> None:
    """Remove the wrapper directories of worker processes that no longer exist (a SIGKILLed
    worker cannot remove its own)."""
    for path in Path(tempfile.gettempdir()).glob("salvage-chromium-*-*"):
        pid = path.name.split("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass  # alive, under another user


_shared: dict[tuple[int, int, str], Chromium] = {}


def shared(executable: str) -> Chromium:
    """This process's Chromium for the running event loop (one browser per worker)."""
    key = (os.getpid(), id(asyncio.get_running_loop()), executable)
    chromium = _shared.get(key)
    if chromium is None:
        chromium = _shared[key] = Chromium(executable)
    return chromium


async def close_shared() -> None:
    loop_id = id(asyncio.get_running_loop())
    for key in [k for k in _shared if k[0] == os.getpid() and k[1] == loop_id]:
        await _shared.pop(key).close()
