"""`manage.py` itself: what a one-shot command prints when it cannot start.

- A help invocation (`manage.py`, `manage.py help [COMMAND]`, `manage.py COMMAND --help`,
  `manage.py --version`) needs no secret key: it serves nothing and signs nothing, and an
  operator reading the usage on a fresh host has no key yet. `recovery.settings` asks
  `help_only(sys.argv)`, which holds only for `manage.py`/`django-admin` and only for those
  shapes of command line; gunicorn, a worker or any other command still refuses to start
  without SECRET_KEY. The key is never taken from an environment variable here, so nothing a
  deployment sets can turn this on for a server.
- A bad setting is one line naming it (exit 2), as before.
- A database that does not answer is one line naming it (vendor, user, host, port and name;
  the password never) and the driver's first line of the cause, exit 1, instead of Django's
  60 to 90 lines of traceback. The long loops (`work`, `dispatch`, `deliver`, `qcluster`)
  wait an outage out themselves (recovery.ops.outage) and exit with their own line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

HELP_FLAGS = frozenset({"--help", "-h"})
HELP_FIRST = frozenset({"help", "--help", "-h", "--version"})
PROGRAMS = frozenset({"manage.py", "django-admin"})


def help_only(argv: Sequence[str]) -> bool:
    """True when this command line can only print usage or a version (no command runs)."""
    if not argv or os.path.basename(argv[0]) not in PROGRAMS:
        return False
    args = list(argv[1:])
    if "--" in args:  # what follows "--" is a command's data, never a flag of ours
        args = args[: args.index("--")]
    if not args:
        return True  # bare `manage.py` prints the list of commands
    return args[0] in HELP_FIRST or any(arg in HELP_FLAGS for arg in args[1:])


def database_label(settings_dict: Mapping[str, Any]) -> str:
    """The database as an operator names it, without its password."""
    engine = str(settings_dict.get("ENGINE", ""))
    name = settings_dict.get("NAME") or ""
    if engine.endswith("sqlite3"):
        return f"sqlite {name}"
    vendor = engine.rsplit(".", 1)[-1] or "database"
    user = settings_dict.get("USER") or ""
    host = settings_dict.get("HOST") or "localhost"
    port = settings_dict.get("PORT") or ""
    where = f"{user}@" * bool(user) + host + f":{port}" * bool(port)
    return f"{vendor} {where}/{name}"


def cause_line(exc: BaseException, password: str = "") -> str:
    """The driver's first non-empty line, the password cut out should a driver quote it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    if password:
        text = text.replace(password, "[redacted]")
    # psycopg prefixes "connection failed: " to the server's own "connection to server ..."
    return text.removeprefix("connection failed: ")


def unreachable_database_line(argv: Sequence[str], exc: BaseException) -> str | None:
    """One line for `exc` if it is the database not answering now, else None (a real error,
    which keeps its traceback)."""
    from django.db import connections

    from recovery.ops import outage

    if not outage.unreachable(exc):
        return None
    settings_dict = connections["default"].settings_dict
    command = argv[1] if len(argv) > 1 else "manage.py"
    return (
        f"{command}: cannot reach the database {database_label(settings_dict)}: "
        f"{cause_line(exc, str(settings_dict.get('PASSWORD') or ''))} "
        "(check DATABASE_URL and that the server is running)"
    )


def main(argv: list[str]) -> int:
    """Run a management command; the exit status for manage.py."""
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(argv)
    except ImproperlyConfigured as exc:
        # A bad setting (an unusable data directory, a malformed DATABASE_URL...) is the
        # user's to fix: one line naming it, not a traceback through Django's internals.
        print(f"manage.py: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # matched below; anything but an unreachable database re-raises
        line = unreachable_database_line(argv, exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1
    return 0
