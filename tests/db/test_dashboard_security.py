"""Log-in throttling, the deploy checklist, and security headers of the dashboard."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from unittest.mock import patch

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from dashboard import login_throttle
from tests.support.world import PASSWORD, make_user

ROOT = Path(__file__).resolve().parents[2]


def _login(client, username: str, password: str, addr: str = "10.0.0.1", **headers):
    return client.post(
        reverse("login"),
        {"username": username, "password": password},
        REMOTE_ADDR=addr,
        **headers,
    )


@pytest.mark.django_db
def test_it_refuses_logins_after_five_failures_per_user_and_address(client):
    make_user("olivia", "operator")
    for _ in range(login_throttle.MAX_FAILURES):
        assert _login(client, "olivia", "wrong").status_code == 200
    with patch("django.contrib.auth.forms.authenticate") as authenticate:
        refused = _login(client, "olivia", PASSWORD)
    authenticate.assert_not_called()  # refused before any password check
    assert refused.status_code == 429
    assert b"Too many failed log-in attempts" in refused.content
    assert "_auth_user_id" not in client.session
    # A forged X-Forwarded-For does not make a new address.
    forged = _login(client, "olivia", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert forged.status_code == 429
    # Another address (or another user from this one) is not locked out.
    assert _login(client, "olivia", PASSWORD, addr="10.0.0.2").status_code == 302


@pytest.mark.django_db
def test_it_lets_the_user_in_again_after_the_window(client):
    make_user("olivia", "operator")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as traveller:
        for _ in range(login_throttle.MAX_FAILURES):
            _login(client, "olivia", "wrong")
        traveller.move_to(start + timedelta(minutes=10))
        assert _login(client, "olivia", PASSWORD).status_code == 429
        traveller.move_to(start + timedelta(minutes=16))
        assert _login(client, "olivia", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_it_resets_the_count_after_a_successful_login(client):
    make_user("olivia", "operator")
    for _ in range(login_throttle.MAX_FAILURES - 1):
        _login(client, "olivia", "wrong")
    assert _login(client, "olivia", PASSWORD).status_code == 302
    client.logout()
    for _ in range(login_throttle.MAX_FAILURES - 1):
        _login(client, "olivia", "wrong")
    assert _login(client, "olivia", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_it_sends_security_headers(client):
    client.force_login(make_user("olivia", "operator"))
    response = client.get(reverse("dashboard:runs"))
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def _deploy_check(**overrides: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SALVAGE_", "DJANGO_", "SECURE_", "CSRF_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="recovery.settings",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="salvage.example.org",
        # Production opts into HSTS preloading (security.W021); see README "Dashboard".
        SECURE_HSTS_PRELOAD="1",
        SALVAGE_DATA_DIR=os.environ.get("SALVAGE_DATA_DIR", str(ROOT / "var")),
    )
    env.update(overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_the_deploy_checklist_with_production_settings():
    result = _deploy_check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_fails_the_deploy_checklist_with_debug_on():
    result = _deploy_check(DEBUG="1")
    assert result.returncode != 0
    assert "security.W018" in result.stdout + result.stderr
