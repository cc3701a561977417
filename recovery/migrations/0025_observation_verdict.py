"""Verdicts judged at commit (recovery.verdicts) and held derived from the partition.

Rows an earlier evaluation stored as `held` go back to `pending`: held is no longer a row's
state (recovery.row_states) and their verdict is unknown, so the next evaluation judges them.
"""

from django.db import migrations, models


def unhold_rows(apps, schema_editor):
    Observation = apps.get_model("recovery", "Observation")
    Observation.objects.filter(validation_state="held").update(validation_state="pending")


class Migration(migrations.Migration):

    dependencies = [
        ('recovery', '0024_partial_error_index_no_delta_run_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='observation',
            name='verdict',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='observation',
            name='verdict_rules',
            field=models.CharField(blank=True, db_default='', default='', max_length=16),
        ),
        migrations.AddField(
            model_name='runpartition',
            name='marked_rows',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='runpartition',
            name='marked_sum',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(unhold_rows, migrations.RunPython.noop),
    ]
