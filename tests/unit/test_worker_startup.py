"""What a worker imports as it starts: the browser provider's error classes come without
Playwright's whole async API (~60 ms of every worker's start-up, browser runs or not)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import django
django.setup()
from recovery.providers import builtin  # what the worker loop imports as it starts
print("playwright.async_api" in sys.modules)
"""


def test_the_worker_loads_every_provider_without_playwrights_async_api():
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_browser_provider_catches_the_classes_playwright_raises():
    import playwright.async_api

    from recovery.providers import browser

    assert browser._PlaywrightError is playwright.async_api.Error
    assert browser._PlaywrightTimeout is playwright.async_api.TimeoutError
