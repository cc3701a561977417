"""Migration tests: move the test database to a named migration and back to the latest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.state import StateApps

Targets = list[tuple[str, str]]


def migrate(targets: Targets) -> StateApps:
    """Migrate to `targets` and return the app registry as it stood there (the historical
    models a test builds its old rows with)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def migrate_to_latest() -> None:
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes("recovery"))


def old_database_at(before: Targets):
    """A fixture that migrates back to `before`, yields that state's apps, and brings the
    schema up to date afterwards so the next test finds today's tables."""

    @pytest.fixture
    def old_database() -> Iterator[StateApps]:
        apps = migrate(before)
        yield apps
        migrate_to_latest()

    return old_database
