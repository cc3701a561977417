"""manage.py createusers: the three roles in one command, idempotent, passwords never shown."""

from __future__ import annotations

import io
import logging
import sys

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from dashboard.management.commands import createusers

pytestmark = pytest.mark.django_db

PASSWORDS = {"admin": "ad-Pw-71f3c9e2", "operator": "op-Pw-4a8d0b6c", "exporter": "ex-Pw-9e2c71aa"}


def run(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("createusers", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def password_file(tmp_path, **passwords: str):
    path = tmp_path / "passwords"
    path.write_text("# first users\n\n" + "".join(f"{u}:{p}\n" for u, p in passwords.items()))
    return str(path)


def groups(username: str) -> set[str]:
    return set(User.objects.get(username=username).groups.values_list("name", flat=True))


def test_it_creates_the_three_roles_from_a_password_file(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    out = run("--password-file", password_file(tmp_path, **PASSWORDS))
    for name, password in PASSWORDS.items():
        user = User.objects.get(username=name)
        assert user.check_password(password)
        assert groups(name) == {name}
        assert user.is_staff == (name == "admin") and not user.is_superuser
        assert password not in out and password not in caplog.text
    assert out.strip() == (
        "users: admin (admin) created; operator (operator) created; exporter (exporter) created"
    )


def test_it_takes_other_names_and_is_idempotent(tmp_path):
    names = ("--admin", "ann", "--operator", "otto", "--exporter", "eve")
    first = password_file(tmp_path, ann="ann-Pw-0c9d1e7f", otto="otto-Pw-5b3a", eve="eve-Pw-8d2f1")
    run(*names, "--password-file", first)
    hashes = dict(User.objects.values_list("username", "password"))

    # Again with no password file: nothing to ask (every user exists), nothing changes.
    out = run(*names)
    assert "ann (admin) unchanged; otto (operator) unchanged; eve (exporter) unchanged" in out
    assert dict(User.objects.values_list("username", "password")) == hashes

    # A password given for one user changes that user's only.
    out = run(*names, "--password-file", password_file(tmp_path, otto="otto-New-2e7c4a"))
    assert "otto (operator) password changed" in out and "ann (admin) unchanged" in out
    assert User.objects.get(username="otto").check_password("otto-New-2e7c4a")
    assert User.objects.get(username="ann").password == hashes["ann"]
    assert User.objects.count() == 3


def test_an_existing_user_gets_its_group_and_keeps_its_password(tmp_path):
    bob = User.objects.create_user("bob", password="bob-Old-7f1e2d3c")
    out = run(
        "--operator", "bob", "--password-file",
        password_file(tmp_path, admin=PASSWORDS["admin"], exporter=PASSWORDS["exporter"]),
    )  # fmt: skip
    assert "bob (operator) added to operator" in out
    bob.refresh_from_db()
    assert bob.check_password("bob-Old-7f1e2d3c") and groups("bob") == {"operator"}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("admin:tiny7\noperator:op-Pw-4a8d0b6c\nexporter:ex-Pw-9e2c71aa\n", "admin's password"),
        ("admin\n", "line 1: expected user:password"),
        ("admin:ad-Pw-71f3c9e2\nadmin:ad-Pw-71f3c9e3\n", "line 2: admin is given twice"),
        ("mallory:mal-Pw-3c1f0e9a\n", "names mallory, not among the users"),
        ("admin:ad-Pw-71f3c9e2\n", "operator (operator) is new and has no password"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, lines, message):
    path = tmp_path / "passwords"
    path.write_text(lines)
    with pytest.raises(CommandError) as caught:
        run("--password-file", str(path))
    assert caught.value.returncode == 2 and message in str(caught.value)
    for line in lines.splitlines():  # no password in the message
        assert ":" not in line or line.partition(":")[2] not in str(caught.value)
    assert not User.objects.exists()


def test_one_name_for_two_roles_is_refused():
    with pytest.raises(CommandError, match="ann is named for two roles"):
        run("--admin", "ann", "--operator", "ann")


def test_on_a_terminal_it_asks_for_new_users_passwords_without_echo(monkeypatch, capsys):
    asked = []

    def fake_getpass(prompt: str) -> str:
        asked.append(prompt)
        return "term-Pw-6a1c0f3e"

    monkeypatch.setattr(createusers.getpass, "getpass", fake_getpass)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    User.objects.create_user("operator", password="op-Old-1b2c3d4e")
    out = run()
    # Two prompts (password, again) for each new user; none for the existing operator.
    assert asked == [
        "Password for admin (admin): ", "Again: ",
        "Password for exporter (exporter): ", "Again: ",
    ]  # fmt: skip
    assert User.objects.get(username="admin").check_password("term-Pw-6a1c0f3e")
    assert User.objects.get(username="operator").check_password("op-Old-1b2c3d4e")
    assert "term-Pw-6a1c0f3e" not in out + capsys.readouterr().out
