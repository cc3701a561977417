"""Move the URL trigram index (migration 0019) off recovery_task, onto a narrow side table.

A claim and a commit change a task's `state`, so neither is a HOT update: each writes a new
entry in every index of recovery_task, and for the GIN trigram index that is one entry per
trigram of the URL (dozens), twice per task. Measured on the schema floor (bench/README.md,
"Claim -> commit"), it was the largest single index cost of a task move. A URL never changes
after the task is created, so its trigrams are now written once, at creation, into
`recovery_task_url_search (task_id, url)`, which carries the index (same name,
task_url_trgm_idx, so dashboard.lists.contains_search finds it as before).

Kept in step by PostgreSQL triggers on recovery_task, so every way a task is created (manifest
freeze, discovered links, sitemaps, raw SQL) and deleted (a run's cascade, TRUNCATE in tests'
flush) is covered without the engine knowing: insert and delete are statement-level with
transition tables (one INSERT/DELETE per statement, not per row); a change of `url` (nothing
does it today) is mirrored by a row trigger that fires only for UPDATEs naming `url`. No
foreign key: Django's flush truncates recovery_task without CASCADE, which a referencing table
would refuse; the TRUNCATE trigger empties the side table instead.

PostgreSQL only, and only where 0019 built the index (pg_trgm available); SQLite keeps the
URL-prefix search and has no side table. Not a model: the model state stays the same on both
databases (makemigrations --check), as in 0019.
"""

from django.db import migrations

INDEX = "task_url_trgm_idx"
TABLE = "recovery_task_url_search"

FORWARD = f"""
CREATE TABLE {TABLE} (task_id bigint PRIMARY KEY, url text NOT NULL);

CREATE FUNCTION {TABLE}_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {TABLE} (task_id, url) SELECT id, url FROM added;
    RETURN NULL;
END $$;
CREATE FUNCTION {TABLE}_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {TABLE} s USING gone g WHERE s.task_id = g.id;
    RETURN NULL;
END $$;
CREATE FUNCTION {TABLE}_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {TABLE} SET url = NEW.url WHERE task_id = NEW.id;
    RETURN NULL;
END $$;
CREATE FUNCTION {TABLE}_emptied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE {TABLE};
    RETURN NULL;
END $$;

CREATE TRIGGER task_url_search_added AFTER INSERT ON recovery_task
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_added();
CREATE TRIGGER task_url_search_gone AFTER DELETE ON recovery_task
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_gone();
CREATE TRIGGER task_url_search_moved AFTER UPDATE OF url ON recovery_task
    FOR EACH ROW WHEN (OLD.url IS DISTINCT FROM NEW.url) EXECUTE FUNCTION {TABLE}_moved();
CREATE TRIGGER task_url_search_emptied AFTER TRUNCATE ON recovery_task
    FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_emptied();

INSERT INTO {TABLE} (task_id, url) SELECT id, url FROM recovery_task;
DROP INDEX {INDEX};
CREATE INDEX {INDEX} ON {TABLE} USING gin (url gin_trgm_ops);
"""

BACKWARD = f"""
DROP TRIGGER task_url_search_added ON recovery_task;
DROP TRIGGER task_url_search_gone ON recovery_task;
DROP TRIGGER task_url_search_moved ON recovery_task;
DROP TRIGGER task_url_search_emptied ON recovery_task;
DROP TABLE {TABLE};
DROP FUNCTION {TABLE}_added(), {TABLE}_gone(), {TABLE}_moved(), {TABLE}_emptied();
CREATE INDEX {INDEX} ON recovery_task USING gin (url gin_trgm_ops);
"""


def _has(schema_editor, sql: str, name: str) -> bool:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql, [name])
        return cursor.fetchone() is not None


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # Where 0019 could not create pg_trgm there is no index to move (prefix search only).
    if _has(schema_editor, "SELECT 1 FROM pg_indexes WHERE indexname = %s", INDEX):
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    if _has(schema_editor, "SELECT 1 FROM pg_tables WHERE tablename = %s", TABLE):
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("recovery", "0020_drop_unused_like_indexes")]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
