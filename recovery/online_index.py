"""A migration operation that adds an index without stopping the writers of its table.

A plain CREATE INDEX holds a SHARE lock for the whole build: the table's writers wait until it
ends. On PostgreSQL this builds it `CONCURRENTLY` (Django's AddIndexConcurrently: the migration
needs `atomic = False`), as docs/production.md ("Upgrade") asks of a new index and
`scripts/lint_migrations.py` checks. A concurrent build that fails (the migration's
`LockTimeout`, a cancel) leaves an INVALID index of that name behind, which would make the next
`migrate` fail with "already exists": it is dropped first, so `migrate` can simply be run again.
SQLite has no CONCURRENTLY and no concurrent writers to keep going: a plain CREATE INDEX there.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.operations import AddIndex


class AddIndexOnline(AddIndexConcurrently):
    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)
            return
        name = schema_editor.quote_name(self.index.name)
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
            return
        super().database_backwards(app_label, schema_editor, from_state, to_state)
