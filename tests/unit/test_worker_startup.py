"""What a worker imports as it starts: the browser provider's error classes come without
Playwright's whole async API (~60 ms of every worker's start-up, browser runs or not), and a
worker on the ORM broker never imports redis-py (~0.1 s)."""

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


def run_probe(code: str) -> str:
    """`code` in a fresh interpreter on the test settings; what it printed."""
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_worker_loads_every_provider_without_playwrights_async_api():
    assert run_probe(PROBE).strip() == "False"


REDIS_PROBE = """
import sys
import django
django.setup()
from django.core.management import load_command_class
from recovery.ops import outage
load_command_class("recovery", "work")  # the command, its loop and the outage guard
from recovery.providers import builtin
print("redis" in sys.modules)
try:
    raise outage.psycopg.OperationalError("gone") if outage.psycopg else OSError()
except outage.outage_errors() as exc:  # matching an error must not import it either
    pass
except OSError:
    pass
print("redis" in sys.modules)
"""


def test_a_worker_on_the_orm_broker_never_imports_redis():
    assert run_probe(REDIS_PROBE).split() == ["False", "False"]


def test_redis_errors_are_outage_errors_once_redis_is_loaded():
    import redis

    from recovery.ops import outage

    assert outage.broker_errors() == (redis.ConnectionError, redis.TimeoutError)
    assert redis.ConnectionError in outage.outage_errors()
    assert isinstance(redis.TimeoutError("slow"), outage.outage_errors())


def test_the_browser_provider_catches_the_classes_playwright_raises():
    import playwright.async_api

    from recovery.providers import browser

    assert browser._PlaywrightError is playwright.async_api.Error
    assert browser._PlaywrightTimeout is playwright.async_api.TimeoutError


HTTPCORE_PROBE = """
import asyncio, sys
import django
django.setup()
from recovery.providers import builtin
from recovery.fetch.fetcher import Fetcher

async def main():
    fetcher = Fetcher()
    fetcher._ensure_client()
    await fetcher.aclose()

asyncio.run(main())
print("httpcore" in sys.modules)
"""


def test_a_worker_on_the_default_transport_never_imports_httpcore():
    """httpcore (~27 ms to import) is loaded by the httpcore transport only."""
    assert run_probe(HTTPCORE_PROBE).strip() == "False"
