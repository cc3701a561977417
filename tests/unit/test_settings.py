"""Settings refuse bad environment values instead of guessing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from recovery import settings as s

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " yes ", "on"])
def test_it_reads_true_booleans(monkeypatch, raw):
    monkeypatch.setenv("X_BOOL", raw)
    assert s.env_bool("X_BOOL", False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_it_reads_false_booleans(monkeypatch, raw):
    monkeypatch.setenv("X_BOOL", raw)
    assert s.env_bool("X_BOOL", True) is False


@pytest.mark.parametrize("raw", ["maybe", "2", "tru", "yes please"])
def test_it_refuses_bad_booleans(monkeypatch, raw):
    monkeypatch.setenv("X_BOOL", raw)
    with pytest.raises(ImproperlyConfigured, match="X_BOOL"):
        s.env_bool("X_BOOL", False)


def test_it_uses_defaults_when_unset(monkeypatch):
    monkeypatch.delenv("X_UNSET", raising=False)
    assert s.env_bool("X_UNSET", True) is True
    assert s.env_int("X_UNSET", 7) == 7
    assert s.env_float("X_UNSET", 1.5) == 1.5


@pytest.mark.parametrize("raw", ["ten", "1.5", "1e3", "0x10"])
def test_it_refuses_bad_integers(monkeypatch, raw):
    monkeypatch.setenv("X_INT", raw)
    with pytest.raises(ImproperlyConfigured, match=r"X_INT.*not an integer"):
        s.env_int("X_INT", 1)


def test_it_refuses_integers_below_the_minimum(monkeypatch):
    monkeypatch.setenv("X_INT", "0")
    with pytest.raises(ImproperlyConfigured, match="below the minimum 1"):
        s.env_int("X_INT", 5, minimum=1)
    monkeypatch.setenv("X_INT", " 12 ")
    assert s.env_int("X_INT", 5, minimum=1) == 12


@pytest.mark.parametrize("raw", ["fast", "nan", "inf", "-1"])
def test_it_refuses_bad_floats(monkeypatch, raw):
    monkeypatch.setenv("X_FLOAT", raw)
    with pytest.raises(ImproperlyConfigured, match="X_FLOAT"):
        s.env_float("X_FLOAT", 1.0, minimum=0.0)


def test_it_reads_a_postgres_url(tmp_path):
    db = s.database_from_url("postgres://alice:p%40ss@db.example:5433/salvage", tmp_path)
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"]) == ("salvage", "alice", "p@ss")
    assert (db["HOST"], db["PORT"]) == ("db.example", "5433")
    assert "synchronous_commit=on" in db["OPTIONS"]["options"]


def test_it_passes_postgres_query_options(tmp_path):
    db = s.database_from_url("postgresql://h/x?sslmode=require", tmp_path)
    assert db["OPTIONS"]["sslmode"] == "require"
    assert db["NAME"] == "x"


def test_it_defaults_to_sqlite_in_wal_mode_under_the_data_dir(tmp_path):
    db = s.database_from_url("", tmp_path)
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(tmp_path / "salvage.sqlite3")
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert db["OPTIONS"]["timeout"] > 0


def test_it_reads_an_absolute_sqlite_url(tmp_path):
    db = s.database_from_url(f"sqlite://{tmp_path}/sub/x.sqlite3", tmp_path)
    assert db["NAME"] == str(tmp_path / "sub" / "x.sqlite3")
    assert (tmp_path / "sub").is_dir()


@pytest.mark.parametrize("url", ["sqlite:relative.db", "sqlite://var/x.db", "sqlite://"])
def test_it_refuses_relative_sqlite_paths(tmp_path, url):
    with pytest.raises(ImproperlyConfigured, match="sqlite"):
        s.database_from_url(url, tmp_path)


def test_a_refused_sqlite_url_never_shows_its_password(tmp_path):
    with pytest.raises(ImproperlyConfigured) as refused:
        s.database_from_url("sqlite://alice:hunter2-secret@host/var/x.db", tmp_path)
    assert "hunter2-secret" not in str(refused.value)
    assert "alice:***@host" in str(refused.value)


@pytest.mark.parametrize("url", ["mysql://u@h/db", "redis://h", "db.sqlite3"])
def test_it_refuses_unsupported_database_urls(tmp_path, url):
    with pytest.raises(ImproperlyConfigured, match="not supported"):
        s.database_from_url(url, tmp_path)


def _load_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Import the product settings in a fresh interpreter with only `env` set."""
    clean = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "SALVAGE_DATA_DIR": str(tmp_path / "var"),
        "DJANGO_SETTINGS_MODULE": "recovery.settings",
        **env,
    }
    code = "import django; from django.conf import settings; print(settings.SECRET_KEY[:6])"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_requires_a_secret_key_when_debug_is_off(tmp_path):
    result = _load_settings(tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_it_starts_with_a_secret_key(tmp_path):
    result = _load_settings(tmp_path, SECRET_KEY="s3cret-for-test")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "s3cret"


@pytest.mark.parametrize("env", [{"DEBUG": "1"}, {"SALVAGE_INSECURE_DEV_KEY": "1"}])
def test_it_allows_the_dev_key_only_when_asked(tmp_path, env):
    result = _load_settings(tmp_path, **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "insecu"


def test_it_refuses_an_unknown_log_format_at_startup(tmp_path):
    result = _load_settings(tmp_path, SALVAGE_LOG_FORMAT="jsno", SECRET_KEY="x")
    assert result.returncode != 0
    assert "SALVAGE_LOG_FORMAT='jsno': expected plain or json" in result.stderr


def test_it_refuses_a_bad_debug_value_at_startup(tmp_path):
    result = _load_settings(tmp_path, DEBUG="perhaps", SECRET_KEY="x")
    assert result.returncode != 0
    assert "DEBUG='perhaps' is not a boolean" in result.stderr


@pytest.mark.parametrize("entry", ["127.0.0.1:99999", "10.0.0.0/33", "localhost:8765"])
def test_it_refuses_a_bad_allow_list_entry_at_start_up(tmp_path, entry):
    """Refused before anything runs, naming the entry: at fetch time it would quarantine
    every page of every run."""
    result = _load_settings(
        tmp_path, SECRET_KEY="s3cret-for-test", SALVAGE_ALLOWED_NETWORKS=f"127.0.0.1:8765,{entry}"
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and repr(entry) in result.stderr


def test_it_starts_with_every_allow_list_form(tmp_path):
    forms = "127.0.0.1:8765,10.0.0.0/8:443,[::1]:8765,[fd00::]/8:443,192.168.0.0/16,::1/128"
    result = _load_settings(tmp_path, SECRET_KEY="s3cret-for-test", SALVAGE_ALLOWED_NETWORKS=forms)
    assert result.returncode == 0, result.stderr
