"""manage.py createusers [--admin NAME] [--operator NAME] [--exporter NAME]
[--password-file FILE]: the first users, one per role (dashboard/accounts.py)."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from dashboard import accounts


def ask_on_terminal(want: accounts.Wanted) -> str:
    """Prompt twice (getpass: nothing is echoed); three tries."""
    for _ in range(3):
        first = getpass.getpass(f"Password for {want.username} ({want.role}): ")
        if first and getpass.getpass("Again: ") == first:
            return first
        sys.stderr.write("The two passwords differ (or are empty); try again.\n")
    raise accounts.AccountError(f"{want.username}: no password confirmed")


class Command(BaseCommand):
    help = (
        "Create (or mend) the admin, operator and exporter users in their role groups. "
        "Passwords come from --password-file (user:password per line) or are asked on the "
        "terminal for new users; an existing user keeps its password unless the file gives one."
    )

    def add_arguments(self, parser) -> None:
        for role in accounts.ROLES:
            parser.add_argument(f"--{role}", default=role, metavar="NAME", help=f"{role} user")
        parser.add_argument(
            "--password-file",
            help="a file of user:password lines (keep it mode 0600, delete it afterwards)",
        )

    def handle(self, *args, **options) -> None:
        passwords: dict[str, str] = {}
        try:
            if options["password_file"]:
                path = Path(options["password_file"])
                try:
                    text = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise accounts.AccountError(f"--password-file {path}: {exc}") from None
                passwords = accounts.parse_password_file(text, str(path))
            wanted = accounts.plan({role: options[role] for role in accounts.ROLES})
            ask = ask_on_terminal if sys.stdin.isatty() else None
            outcomes = accounts.ensure_users(wanted, passwords, ask)
        except accounts.AccountError as exc:
            raise CommandError(str(exc), returncode=2) from None
        self.stdout.write("users: " + "; ".join(o.describe() for o in outcomes))
