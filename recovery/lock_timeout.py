"""A migration operation that caps how long the migration waits for a table lock.

Almost every ALTER TABLE takes an ACCESS EXCLUSIVE lock. It is held for milliseconds, but it
waits behind any transaction that touches the table (a long export, a dashboard query), and
while it waits every other query of that table queues behind it: the workers' claims and
commits stop. `LockTimeout` first makes PostgreSQL give up instead (`SET LOCAL lock_timeout`):
the migration fails, its transaction rolls back, nothing is half-applied, and `migrate` can
simply be run again. Put it first in every migration that alters an existing table;
`scripts/lint_migrations.py` (CI) fails a new migration without it (docs/production.md,
"Upgrade"). SQLite has no such setting and no concurrent writers to wait for: nothing is run
there.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.migrations.operations.base import Operation

# PostgreSQL's units for a time setting: '5s', '500ms', '1min'.
_TIMEOUT = re.compile(r"^[0-9]+(ms|s|min)$")


class LockTimeout(Operation):
    reduces_to_sql = True
    reversible = True

    def __init__(self, timeout: str = "5s") -> None:
        if not _TIMEOUT.match(timeout):
            raise ValueError(f"lock timeout {timeout!r}: write it as '5s', '500ms' or '1min'")
        self.timeout = timeout

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # no model changes

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        # SET LOCAL ends with the migration's transaction; a non-atomic migration has none, so
        # the session's setting is changed instead (for the rest of this `migrate`).
        scope = "SET LOCAL" if schema_editor.atomic_migration else "SET"
        schema_editor.execute(f"{scope} lock_timeout = '{self.timeout}'")

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        self.database_forwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"Wait at most {self.timeout} for each lock (PostgreSQL)"
