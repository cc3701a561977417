"""A trigram index on task URLs, so a run's task list can search any part of a URL.

PostgreSQL only: `url LIKE '%part%'` reads task_url_trgm_idx (pg_trgm's GIN operator class)
instead of the whole task table. pg_trgm is a trusted extension from PostgreSQL 13 on, so the
database owner may create it; where the role may not, the migration says so and builds no
index, and the dashboard keeps the URL-prefix search (dashboard.lists.contains_search). On
SQLite this migration does nothing: the search there stays a prefix range on task_run_url_idx.

Not in Task.Meta: the operator class exists only on PostgreSQL, and the model state must stay
the same on both databases (makemigrations --check).
"""

import sys

from django.db import migrations

INDEX = "task_url_trgm_idx"


def add_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        if cursor.fetchone() is None:
            cursor.execute("SAVEPOINT salvage_trgm")
            try:
                cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            except Exception as error:  # noqa: BLE001 - any refusal leaves the prefix search
                cursor.execute("ROLLBACK TO SAVEPOINT salvage_trgm")
                print(
                    f"\n  pg_trgm could not be created ({error}); the task list keeps the "
                    "URL-prefix search. A superuser can run CREATE EXTENSION pg_trgm and "
                    "migrate recovery 0018 then 0019 again.",
                    file=sys.stderr,
                )
                return
            cursor.execute("RELEASE SAVEPOINT salvage_trgm")
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON recovery_task USING gin (url gin_trgm_ops)"
        )


def drop_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("recovery", "0018_sitemap_discovery"),
    ]

    operations = [
        migrations.RunPython(add_trigram_index, drop_trigram_index, elidable=False),
    ]
