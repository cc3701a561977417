"""`manage.py demo --data-dir X` where X does not exist yet: with SQLite the database file's
directory was created by the settings, with a PostgreSQL DATABASE_URL nothing created it and
writing the demo's passwords failed with FileNotFoundError."""

from __future__ import annotations

import stat

import pytest

from recovery.showroom import demo

pytestmark = pytest.mark.django_db


def test_it_creates_a_missing_data_directory_for_the_demo_users(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "not" / "there-yet"
    logins = demo.ensure_users()
    passwords = settings.DATA_DIR / "demo-passwords"
    assert passwords.is_file()
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    assert set(logins) == set(demo.USERS)
    assert demo.ensure_users() == logins  # kept, not regenerated
