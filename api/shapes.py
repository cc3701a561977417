"""The API's JSON shapes, declared for the OpenAPI document (drf-spectacular reads them).

The views build their answers from recovery.consumers.catalogue and feed; these serializers
only describe them, field for field, so the document says what a client receives.
"""

from __future__ import annotations

from rest_framework import serializers


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField(help_text="A stable machine-readable code (docs/api.md).")
    message = serializers.CharField()


class Error(serializers.Serializer):
    error = ErrorDetail()


class Links(serializers.Serializer):
    csv = serializers.URLField()
    jsonl = serializers.URLField()
    parquet = serializers.URLField()


class RunObject(serializers.Serializer):
    id = serializers.IntegerField()
    dataset = serializers.CharField()
    window = serializers.CharField()
    state = serializers.ChoiceField(choices=["accepted", "published"])
    accepted_at = serializers.DateTimeField(allow_null=True)
    published_at = serializers.DateTimeField(allow_null=True)
    rows = serializers.IntegerField(help_text="Rows in its export (valid, not held).")
    scraper_version = serializers.CharField()
    schema_version = serializers.CharField()
    stopped_reason = serializers.CharField(
        help_text="Why provider jobs of the run stopped early (e.g. token_cap); empty if none."
    )
    coverage_note = serializers.CharField(
        help_text="Why the run's coverage is known to be incomplete; empty if it is not."
    )
    formats = serializers.ListField(child=serializers.CharField())
    exports = Links(help_text="This run's export in each format.")


class DatasetObject(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.IntegerField(
        help_text="The change feed's number of the dataset's newest change; read it before a "
        "download, then ask for changes since it."
    )
    current_run = RunObject(allow_null=True)
    current = Links(help_text="The current run's export in each format.")


class DatasetList(serializers.Serializer):
    datasets = DatasetObject(many=True)


class RunList(serializers.Serializer):
    dataset = serializers.CharField()
    runs = RunObject(many=True)
    next = serializers.URLField(allow_null=True)


class Row(serializers.Serializer):
    observation_key = serializers.CharField()
    entity_key = serializers.CharField()
    window = serializers.CharField()
    partition = serializers.CharField()
    source_task_key = serializers.CharField(allow_null=True)
    scraper_version = serializers.CharField()
    version = serializers.IntegerField()
    stopped_reason = serializers.CharField()
    coverage_note = serializers.CharField()
    payload = serializers.DictField()


class RowsPage(serializers.Serializer):
    dataset = serializers.CharField()
    run = serializers.IntegerField()
    rows = Row(many=True)
    next = serializers.CharField(
        allow_null=True, help_text="Pass as `after` for the next page; null after the last row."
    )


class Change(serializers.Serializer):
    version = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["accepted", "published", "correction"])
    run = serializers.IntegerField()
    at = serializers.DateTimeField()
    observation_key = serializers.CharField(required=False)
    entity_key = serializers.CharField(required=False)
    observation_version = serializers.IntegerField(required=False)
    row = Row(
        required=False,
        allow_null=True,
        help_text="The corrected row as exported now; null: it is no longer exported.",
    )
    summary = serializers.DictField(required=False)


class Changes(serializers.Serializer):
    dataset = serializers.CharField()
    since = serializers.IntegerField()
    version = serializers.IntegerField()
    current_run = serializers.IntegerField(allow_null=True)
    changes = Change(many=True)
    more = serializers.BooleanField()
    next_since = serializers.IntegerField()
