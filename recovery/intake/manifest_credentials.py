"""A schedule's manifest URL never holds its credential: it names an environment variable.

A schedule's manifest source is stored in the database, shown (without user, password or
query) on the Schedules page and in the audit log. So a source whose query carries a
credential written out (a parameter named like a token, key, secret, password, signature or
auth) is refused, and the credential is written as `${SALVAGE_MANIFEST_<NAME>}` instead: the
dispatcher fills it in from its own environment at the moment it fetches the manifest, so the
secret is in the process environment only, like every other secret of the deployment. A URL
with a user or password is refused too: the fetcher never sends one.

    https://feeds.example/m.csv?format=csv&token=${SALVAGE_MANIFEST_FEED_TOKEN}

A `sitemap:` source takes no credential at all: its pages' URLs are stored as tasks.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlsplit

from recovery.intake.recurrence import ScheduleError

PREFIX = "SALVAGE_MANIFEST_"
PLACEHOLDER = re.compile(r"\$\{(" + PREFIX + r"[A-Z0-9_]+)\}")
# Query parameters whose value is a credential: a name holding any of these words.
_SECRET_WORDS = ("token", "key", "secret", "password", "passwd", "sig", "auth", "credential")


def _only_placeholders(value: str) -> bool:
    return bool(value) and not PLACEHOLDER.sub("", value)


def problem(url: str) -> str | None:
    """Why `url` cannot be a manifest source as written (None when it can)."""
    parts = urlsplit(url)
    other = set(re.findall(r"\$\{([^}]*)\}", url)) - set(placeholders(url))
    if other:
        return (
            f"only ${{{PREFIX}<NAME>}} variables are filled in (A-Z, 0-9, _), "
            f"not {', '.join(sorted(other))}"
        )
    if parts.username is not None or parts.password is not None:
        # The fetcher refuses such a URL anyway; and it would be stored with its secret.
        return (
            "a user or password in the URL (refused by the fetcher); send the credential "
            f"in the query as ${{{PREFIX}<NAME>}}"
        )
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if any(word in name.lower() for word in _SECRET_WORDS) and not _only_placeholders(value):
            return (
                f"the query parameter {name!r} would store its credential in the database; "
                f"write it as ${{{PREFIX}<NAME>}} and set that variable in the dispatcher's "
                "environment"
            )
    return None


def placeholders(url: str) -> list[str]:
    return PLACEHOLDER.findall(url)


def filled(source: str) -> str:
    """`source` with each placeholder replaced by its variable's value (ScheduleError naming a
    variable that is not set: the schedule's failure, retried like a manifest that fails)."""

    def value(match: re.Match) -> str:
        found = os.environ.get(match.group(1))
        if not found:
            raise ScheduleError(
                "manifest",
                f"environment variable {match.group(1)} is not set in the dispatcher's "
                "environment (the manifest source names it)",
            )
        return found

    return PLACEHOLDER.sub(value, source)


def values() -> list[str]:
    """The values of every SALVAGE_MANIFEST_* variable set: secrets, kept out of the logs."""
    return [v for k, v in os.environ.items() if k.startswith(PREFIX) and len(v) >= 6]
