"""Roles: the operator, admin and exporter groups with their permissions (dashboard.roles)."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from dashboard.roles import sync_roles

    sync_roles(apps, using=schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("recovery", "0002_cache_table"),
    ]

    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
