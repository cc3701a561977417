"""Fail a new migration that would stop the workers during an online upgrade (CI's lint step).

docs/production.md ("Upgrade") migrates while the previous release's processes run. A
migration must therefore keep the old code working (expand first, contract a release later)
and must not hold the tables the workers use for long. Each migration newer than
GRANDFATHERED (the ones that existed when this check arrived are not judged) is turned into
the SQL PostgreSQL would run, as `manage.py sqlmigrate` prints it, and read by two maintained
linters:

- django-migration-linter (pinned): backward-incompatible steps, which break the old code
  still running: a NOT NULL column without a default, a dropped or renamed column or table, a
  column's type changed, a unique constraint added to an existing table.
- squawk (pinned, `squawk-cli`): the locks. An ACCESS EXCLUSIVE lock (nearly every ALTER
  TABLE) taken without `lock_timeout` set first (`recovery.lock_timeout.LockTimeout`), a table
  rewrite (a column's type changed, a volatile default), an index built without
  CONCURRENTLY, a constraint validated under the lock. django-migration-linter has no lock
  rule at all (its checks are listed in its sql_analyser/base.py and postgresql.py), so it
  alone would pass an unguarded ALTER TABLE; tests/db/test_migration_lint.py shows both
  sides.

A migration that must break a rule says why in a comment and names the rule in
ALLOWED (reviewed like code). Exit 0 when every new migration passes, 1 otherwise, with
each finding. Needs PostgreSQL (`DATABASE_URL`): the SQL is PostgreSQL's.

    DATABASE_URL=postgres://... .venv/bin/python scripts/lint_migrations.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The newest migration of each app when this check arrived (issue 27): these and older ones
# are not linted. Never move these forward to let a new migration through; use ALLOWED.
GRANDFATHERED = {"recovery": 30, "consumers": 1, "dashboard": 1}

# (app, migration name) -> rules it may break, each with the reason in the migration.
ALLOWED: dict[tuple[str, str], set[str]] = {}

# squawk's rules that judge SQL style, not locks or rewrites: Django writes these columns
# (integer keys, varchar, CREATE TABLE without IF NOT EXISTS) and they cost nothing online.
# statement_timeout is left out on purpose: a bounded backfill may rightly run for minutes;
# lock_timeout is what keeps the workers' queries from queueing behind a migration.
SQUAWK_EXCLUDED = (
    "prefer-bigint-over-int",
    "prefer-bigint-over-smallint",
    "prefer-identity",
    "prefer-text-field",
    "prefer-robust-stmts",
    "require-statement-timeout",
)
PG_VERSION = "14"  # the oldest PostgreSQL docs/production.md supports


@dataclass(frozen=True)
class Finding:
    app: str
    migration: str
    linter: str  # "django-migration-linter" or "squawk"
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.app}.{self.migration}: [{self.linter} {self.rule}] {self.message}"


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery.settings")
    os.environ.setdefault("SALVAGE_INSECURE_DEV_KEY", "1")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def new_migrations(loader) -> list:
    """The migrations of our apps numbered after GRANDFATHERED, oldest first."""
    found = []
    for (app, name), migration in loader.disk_migrations.items():
        number = re.match(r"^(\d+)_", name)
        if app in GRANDFATHERED and number and int(number.group(1)) > GRANDFATHERED[app]:
            found.append(migration)
    return sorted(found, key=lambda m: (m.app_label, m.name))


def migration_sql(migration, state) -> list[str]:
    """The statements `sqlmigrate` prints for `migration` applied on top of `state`."""
    from django.db import connection

    with connection.schema_editor(collect_sql=True, atomic=migration.atomic) as editor:
        migration.apply(state.clone(), editor, collect_sql=True)
    statements = [s for s in editor.collected_sql if not s.startswith("--")]
    if migration.atomic:
        statements = ["BEGIN;", *statements, "COMMIT;"]
    return statements


def compatibility_findings(app: str, name: str, statements: list[str]) -> list[Finding]:
    from django_migration_linter.sql_analyser.analyser import (
        analyse_sql_statements,
        get_sql_analyser_class,
    )

    errors, _ignored, _warnings = analyse_sql_statements(
        get_sql_analyser_class("postgresql"), statements
    )
    # Its CREATE INDEX warnings are squawk's require-concurrent-index-creation, reported there.
    return [
        Finding(app, name, "django-migration-linter", issue.code, issue.message) for issue in errors
    ]


_GCC = re.compile(r"^(?P<file>[^:]+):\d+:\d+: (?:warning|error): (?P<rule>[a-z-]+) (?P<msg>.*)$")


def squawk_binary() -> str:
    local = Path(sys.executable).with_name("squawk")
    return str(local) if local.exists() else "squawk"


def lock_findings(app: str, name: str, statements: list[str]) -> list[Finding]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{app}.{name}.sql"
        path.write_text("\n".join(statements) + "\n")
        done = subprocess.run(
            [
                squawk_binary(),
                "--pg-version",
                PG_VERSION,
                "--reporter",
                "gcc",
                "--exclude",
                ",".join(SQUAWK_EXCLUDED),
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    findings = []
    for line in done.stdout.splitlines():
        match = _GCC.match(line)
        if match:
            findings.append(Finding(app, name, "squawk", match["rule"], match["msg"].strip()))
    if done.returncode != 0 and not findings:
        raise RuntimeError(f"squawk failed without a finding:\n{done.stdout}\n{done.stderr}")
    return findings


def lint(migration, state) -> list[Finding]:
    app, name = migration.app_label, migration.name
    statements = migration_sql(migration, state)
    findings = compatibility_findings(app, name, statements) + lock_findings(app, name, statements)
    allowed = ALLOWED.get((app, name), set())
    return [f for f in findings if f.rule not in allowed]


def main() -> int:
    setup_django()
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    if connection.vendor != "postgresql":
        print("lint_migrations: needs DATABASE_URL=postgres://... (the SQL judged is PostgreSQL's)")
        return 2
    loader = MigrationLoader(connection)
    migrations = new_migrations(loader)
    if not migrations:
        print("lint_migrations: no migration newer than the grandfathered ones")
        return 0
    findings = []
    for migration in migrations:
        state = loader.project_state((migration.app_label, migration.name), at_end=False)
        found = lint(migration, state)
        print(f"{migration.app_label}.{migration.name}: {'OK' if not found else 'FAILED'}")
        findings += found
    for finding in findings:
        print(f"  {finding}")
    if findings:
        print(
            "lint_migrations: a migration above would hold the workers' tables during an online "
            "upgrade or break the release still running; see docs/production.md, 'Upgrade'"
        )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
