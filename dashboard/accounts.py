"""The first users of a deployment: one per role (dashboard.roles), made or mended in place.

`manage.py createusers` calls `ensure_users`. It is idempotent: a user that exists keeps its
password unless a new one is given, and is put in its role's group (never taken out of
another); a new user needs a password. Every password is checked (Django's validators, with
the user) before anything is written, so a bad one changes nothing. Passwords are never
printed or logged; the outcome names users, roles and what changed only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError

from dashboard.roles import ADMIN, EXPORTER, OPERATOR

# The command's order: the admin first, as an operator would create them.
ROLES = (ADMIN, OPERATOR, EXPORTER)


class AccountError(ValueError):
    """Bad input, naming the user or the password file's line (never a password)."""


@dataclass(frozen=True, slots=True)
class Wanted:
    username: str
    role: str


@dataclass(frozen=True, slots=True)
class Outcome:
    username: str
    role: str
    created: bool
    password_changed: bool
    joined_group: bool

    def describe(self) -> str:
        if self.created:
            return f"{self.username} ({self.role}) created"
        changes = [
            what
            for what, done in (
                ("password changed", self.password_changed),
                (f"added to {self.role}", self.joined_group),
            )
            if done
        ]
        return f"{self.username} ({self.role}) " + (", ".join(changes) or "unchanged")


def parse_password_file(text: str, source: str) -> dict[str, str]:
    """`user:password` a line; blank lines and `#` comments skipped. The password is what
    follows the first colon, as written (spaces included)."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        username, colon, password = line.partition(":")
        username = username.strip()
        if not colon or not username or not password:
            raise AccountError(f"{source} line {number}: expected user:password")
        if username in found:
            raise AccountError(f"{source} line {number}: {username} is given twice")
        found[username] = password
    return found


def plan(names: dict[str, str]) -> list[Wanted]:
    """role -> username, checked: every name valid and no name given two roles."""
    field = get_user_model()._meta.get_field("username")
    seen: dict[str, str] = {}
    wanted = []
    for role in ROLES:
        username = names[role]
        try:
            field.run_validators(username)
            field.clean(username, None)
        except ValidationError as exc:
            raise AccountError(f"{role} user {username!r}: {' '.join(exc.messages)}") from None
        if username in seen:
            raise AccountError(f"{username} is named for two roles ({seen[username]}, {role})")
        seen[username] = role
        wanted.append(Wanted(username, role))
    return wanted


def ensure_users(
    wanted: Iterable[Wanted],
    passwords: dict[str, str],
    ask: Callable[[Wanted], str] | None = None,
) -> list[Outcome]:
    """Create or mend each wanted user. `passwords` are given ones (username -> password);
    `ask(wanted)` is called for a new user without one (None: that is an error)."""
    User = get_user_model()
    wanted = list(wanted)
    groups = {g.name: g for g in Group.objects.filter(name__in=[w.role for w in wanted])}
    missing = sorted({w.role for w in wanted} - set(groups))
    if missing:
        raise AccountError(
            f"no group {', '.join(missing)}: run `manage.py migrate` first (it makes the roles)"
        )
    unknown = sorted(set(passwords) - {w.username for w in wanted})
    if unknown:
        raise AccountError(
            f"the password file names {', '.join(unknown)}, not among the users to create "
            f"({', '.join(w.username for w in wanted)})"
        )
    # Everything is decided and checked before the first write.
    steps = []
    for want in wanted:
        user = User.objects.filter(username=want.username).first()
        password = passwords.get(want.username)
        if user is None and password is None:
            if ask is None:
                raise AccountError(
                    f"{want.username} ({want.role}) is new and has no password: give one in "
                    "--password-file, or run on a terminal to be asked"
                )
            password = ask(want)
        candidate = user or User(username=want.username)
        if password is not None:
            try:
                validate_password(password, candidate)
            except ValidationError as exc:
                raise AccountError(
                    f"{want.username}'s password: {' '.join(exc.messages)}"
                ) from None
        steps.append((want, user, candidate, password))
    outcomes = []
    for want, user, candidate, password in steps:
        if password is not None:
            candidate.set_password(password)
        # Only the admin role may open Django's admin for raw records (as in the demo).
        candidate.is_staff = candidate.is_staff or want.role == ADMIN
        candidate.save()
        group = groups[want.role]
        joined = user is None or not candidate.groups.filter(pk=group.pk).exists()
        candidate.groups.add(group)
        outcomes.append(
            Outcome(
                want.username,
                want.role,
                created=user is None,
                password_changed=user is not None and password is not None,
                joined_group=user is not None and joined,
            )
        )
    return outcomes
