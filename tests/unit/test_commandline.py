"""recovery/ops/commandline.py: which command lines may run without a secret key, and how an
unreachable database is named (never its password)."""

from __future__ import annotations

import pytest

from recovery.ops.commandline import cause_line, database_label, help_only


@pytest.mark.parametrize(
    "argv",
    [
        ["manage.py"],
        ["manage.py", "help"],
        ["manage.py", "help", "work"],
        ["manage.py", "help", "--commands"],
        ["manage.py", "--help"],
        ["manage.py", "-h"],
        ["manage.py", "--version"],
        ["manage.py", "work", "--help"],
        ["manage.py", "createrun", "shop", "-h"],
        ["/srv/salvage/manage.py", "migrate", "--help"],
        ["django-admin", "help"],
    ],
)
def test_it_allows_help_invocations(argv):
    assert help_only(argv)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["manage.py", "runserver"],
        ["manage.py", "work"],
        ["manage.py", "migrate"],
        ["manage.py", "shell", "-c", "print(1)"],
        ["manage.py", "shell", "--", "--help"],  # after "--" it is data
        ["manage.py", "createrun", "shop", "--window=--help"],
        ["gunicorn", "recovery.wsgi:application", "--help"],
        ["/usr/bin/pytest", "--help"],
        ["python", "-c", "help"],
    ],
)
def test_it_refuses_everything_else(argv):
    assert not help_only(argv)


def test_it_names_a_database_without_its_password():
    label = database_label(
        {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "salvage",
            "USER": "app",
            "PASSWORD": "hunter2-secret",
            "HOST": "db.internal",
            "PORT": "6432",
        }
    )
    assert label == "postgresql app@db.internal:6432/salvage"
    assert database_label({"ENGINE": "django.db.backends.sqlite3", "NAME": "/v/s.db"}) == (
        "sqlite /v/s.db"
    )


def test_the_cause_is_one_line_without_the_password():
    exc = RuntimeError(
        'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
        'FATAL:  password authentication failed for user "app" (hunter2-secret)\n'
        "\tIs the server running?"
    )
    line = cause_line(exc, "hunter2-secret")
    assert "\n" not in line and "hunter2-secret" not in line
    assert line.startswith('connection to server at "10.0.0.5"')
