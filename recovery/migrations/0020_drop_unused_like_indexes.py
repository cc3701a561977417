"""Drop the `varchar_pattern_ops` ("_like") indexes Django adds on PostgreSQL next to the unique
indexes of Task.task_key, Observation.observation_key and WorkerHeartbeat.worker.

They serve only LIKE/startswith lookups, and nothing queries these columns that way (the keys
are SHA-256 hex; the dashboard's searches use Task.url and the error text). Yet every task
update that moves `state` (claim, commit: not a HOT update) and every observation insert paid
one more index entry for them (issue 15, bench/README.md). The unique indexes stay. SQLite has
no such indexes: this migration does nothing there.
"""

from django.db import migrations

FIELDS = [("task", "task_key"), ("observation", "observation_key"), ("workerheartbeat", "worker")]


def _like_names(apps, schema_editor):
    for model_name, column in FIELDS:
        model = apps.get_model("recovery", model_name)
        table = model._meta.db_table
        # The same name Django's PostgreSQL schema editor gave the index it created.
        yield table, column, schema_editor._create_index_name(table, [column], suffix="_like")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for _table, _column, name in _like_names(apps, schema_editor):
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def restore(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    q = schema_editor.quote_name
    for table, column, name in _like_names(apps, schema_editor):
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {q(name)} ON {q(table)} ({q(column)} varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [("recovery", "0019_task_url_trigram_idx")]

    operations = [migrations.RunPython(drop, restore)]
