"""Headless Chromium for the dashboard's browser tests (Debian's chromium, Playwright's sync API).

Playwright's sync API runs an event loop in this thread, which trips Django's async-safety
check on ORM calls made by the test itself; the tests are plain synchronous code, so it is off.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
CHROMIUM = os.environ.get("SALVAGE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Module scope, not session: while sync_playwright() is open its event loop counts as running
# in the main thread, and every later test that calls asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide Chromium at {CHROMIUM} (.ci/run installs it)")
        pytest.skip(f"needs Chromium at {CHROMIUM}: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
    page.js_errors = errors
    yield page
    context.close()
    # No script error and no alert() from a payload on any page a test visited.
    assert errors == []


@pytest.fixture
def screenshot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
