"""The migration check CI runs (scripts/lint_migrations.py) fails what an online upgrade cannot
take, passes what it can, and `LockTimeout` really makes a blocked migration give up.

The fixture migrations are built here and turned into SQL the way the script turns the
repository's new migrations into SQL (the PostgreSQL schema editor, as `sqlmigrate`).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from django.db import OperationalError, connection, migrations, models
from django.db.migrations.loader import MigrationLoader

from recovery.lock_timeout import LockTimeout

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


def load_script():
    spec = importlib.util.spec_from_file_location(
        "lint_migrations", ROOT / "scripts" / "lint_migrations.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


lint_migrations = load_script()


def judged(*operations) -> dict[str, set[str]]:
    """Each linter's rules broken by a new migration of `operations` on today's schema."""
    loader = MigrationLoader(connection)
    state = loader.project_state(loader.graph.leaf_nodes("recovery")[0], at_end=True)
    migration = migrations.Migration("0999_fixture", "recovery")
    migration.operations = list(operations)
    found: dict[str, set[str]] = {"django-migration-linter": set(), "squawk": set()}
    for finding in lint_migrations.lint(migration, state):
        found[finding.linter].add(finding.rule)
    return found


def nullable_column():
    return migrations.AddField("task", "lint_probe", models.IntegerField(null=True))


@pytest.mark.django_db
def test_it_fails_an_alter_table_without_lock_timeout_which_the_compatibility_linter_passes(
    postgres_only,
):
    found = judged(nullable_column())
    # django-migration-linter alone would let it through: it has no lock rule.
    assert found == {"django-migration-linter": set(), "squawk": {"require-lock-timeout"}}


@pytest.mark.django_db
def test_it_passes_the_same_column_behind_a_lock_timeout(postgres_only):
    assert judged(LockTimeout(), nullable_column()) == {
        "django-migration-linter": set(),
        "squawk": set(),
    }


@pytest.mark.django_db
def test_it_fails_a_table_rewrite_even_behind_a_lock_timeout(postgres_only):
    # smallint -> bigint rewrites every row of recovery_task under ACCESS EXCLUSIVE.
    found = judged(
        LockTimeout(), migrations.AlterField("task", "priority", models.BigIntegerField(default=0))
    )
    assert "changing-column-type" in found["squawk"]
    assert "ALTER_COLUMN" in found["django-migration-linter"]


@pytest.mark.django_db
def test_it_fails_what_the_previous_release_cannot_run_on(postgres_only):
    dropped = judged(LockTimeout(), migrations.RemoveField("task", "last_error_class"))
    assert "DROP_COLUMN" in dropped["django-migration-linter"]
    required = judged(
        LockTimeout(), migrations.AddField("task", "lint_probe", models.IntegerField(default=0))
    )
    # Django drops the default after adding the column: the old code's INSERTs would fail.
    assert "NOT_NULL" in required["django-migration-linter"]
    index = judged(
        LockTimeout(),
        migrations.AddIndex("task", models.Index(fields=["url"], name="lint_probe_idx")),
    )
    assert "require-concurrent-index-creation" in index["squawk"]


def test_the_repository_passes_as_ci_runs_it(postgres_only):
    from tests.support.scratch_db import server_url

    env = {**os.environ, "DATABASE_URL": server_url("postgres"), "SALVAGE_INSECURE_DEV_KEY": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "scripts/lint_migrations.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.django_db(transaction=True)
def test_lock_timeout_makes_a_blocked_migration_give_up_and_leave_nothing(postgres_only):
    from tests.support.scratch_db import server_url

    loader = MigrationLoader(connection)
    state = loader.project_state(loader.graph.leaf_nodes("recovery")[0], at_end=True)
    migration = migrations.Migration("0999_fixture", "recovery")
    migration.operations = [LockTimeout("300ms"), nullable_column()]
    # A long reader of recovery_task (an export, a dashboard page) holds its lock.
    with psycopg.connect(server_url(connection.settings_dict["NAME"])) as reader:
        reader.execute("SELECT count(*) FROM recovery_task").fetchall()  # ACCESS SHARE, held
        started = time.monotonic()
        with pytest.raises(OperationalError, match="lock timeout"):  # noqa: SIM117
            with connection.schema_editor(atomic=True) as editor:
                migration.apply(state.clone(), editor)
        waited = time.monotonic() - started
        reader.rollback()
    assert waited < 10  # without the timeout it waits as long as the reader holds on
    columns = [c.name for c in connection.introspection.get_table_description(
        connection.cursor(), "recovery_task")]  # fmt: skip
    assert "lint_probe" not in columns


def test_lock_timeout_runs_nothing_on_sqlite_and_refuses_a_malformed_timeout():
    ran: list[str] = []
    sqlite = SimpleNamespace(connection=SimpleNamespace(vendor="sqlite"), atomic_migration=True,
                             execute=ran.append)  # fmt: skip
    LockTimeout().database_forwards("recovery", sqlite, None, None)
    assert ran == []
    postgres = SimpleNamespace(connection=SimpleNamespace(vendor="postgresql"),
                               atomic_migration=False, execute=ran.append)  # fmt: skip
    LockTimeout("2s").database_forwards("recovery", postgres, None, None)
    assert ran == ["SET lock_timeout = '2s'"]  # no transaction to be LOCAL to
    with pytest.raises(ValueError, match="'5'"):
        LockTimeout("5")
