"""Shared fixtures. Tests that need PostgreSQL or Redis say so when they skip; CI runs them."""

from __future__ import annotations

import os

import pytest
from django.db import connection
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# The sandbox shop over real sockets (`sandbox`, `make_sandbox`, `sandbox_process`), for
# every tier: registered once here, so test modules name the fixture and import nothing. The
# page archive's `broken_run` (a run its selector failed on one retailer) likewise.
pytest_plugins = ["tests.support.sandbox", "tests.support.page_archive"]

# Property tests judge correctness, never speed: on a loaded CI machine a deadline or the
# too_slow health check fails a correct test at random. HYPOTHESIS_PROFILE=default restores
# Hypothesis's own checks for local work.
hypothesis_settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def postgres_only():
    if not on_postgres():
        pytest.skip("needs PostgreSQL: run with DATABASE_URL=postgres://... (CI does)")


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("REDIS_TEST_URL") or os.environ.get("REDIS_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI must provide REDIS_TEST_URL for the Redis-broker tests")
        pytest.skip("needs Redis: set REDIS_TEST_URL=redis://127.0.0.1:6379/15 (CI does)")
    return url
