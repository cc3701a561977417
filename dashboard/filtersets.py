"""Each dashboard list's django-filter filterset: its filters and what its search box means.

Every search is a range an index serves: a run's tasks by URL prefix through task_run_url_idx
(or, with match=contains on PostgreSQL, any part of the URL through the trigram index), the
reconcile queue by provider job id prefix, the other lists by their name or id. The declarations
in dashboard.lists pair each filterset with the sorts and CSV columns of its page.
"""

from __future__ import annotations

import re

import django_filters
from django.db import connections
from django.db.models import Func, Q, QuerySet, TextField, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Concat
from django.forms import SearchInput, TextInput

from dashboard.keysearch import dataset_providers
from recovery import attention
from recovery.delivery import outbox
from recovery.models import (
    AuditEntry,
    Dataset,
    Incident,
    OutboxEvent,
    RemoteJob,
    Run,
    Schedule,
    Task,
    WorkerHeartbeat,
)
from recovery.ops import liveness
from recovery.states.choices import DeliveryState, RemoteJobState, RunState, TaskState
from recovery.states.remote_job import RECONCILE

# The URL sort/search key: the first URL_KEY_CHARS characters in byte order. A btree entry must
# stay under ~2.7 kB and a URL may be up to 8 kB; byte order ("C" collation) is what makes one
# index serve both ORDER BY and a prefix range. Index: task_run_url_idx (Task.Meta, migrations
# 0006 and 0011).
URL_KEY_CHARS = 500
SEARCH_MAX = 2000
# A trigram index can only narrow a search of at least one trigram (three characters).
CONTAINS_MIN = 3
TRIGRAM_INDEX = "task_url_trgm_idx"  # recovery migrations 0019 and 0021
# Where that index lives (migration 0021): (task_id, url), kept in step by triggers, so a claim
# or commit (never a HOT update) does not write a URL's trigrams into recovery_task's indexes.
URL_SEARCH_TABLE = "recovery_task_url_search"
_contains_ok: dict[str, bool] = {}


def contains_search(alias: str = "default") -> bool:
    """Whether a run's tasks can be searched by any part of the URL on this database.

    Only on PostgreSQL with the trigram index of migrations 0019/0021 (pg_trgm); without it
    `LIKE '%part%'` would read every task of the run, so the search stays a prefix range.
    """
    if alias not in _contains_ok:
        connection = connections[alias]
        found = False
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [TRIGRAM_INDEX])
                found = cursor.fetchone() is not None
        _contains_ok[alias] = found
    return _contains_ok[alias]


class UrlKey(Func):
    """substr(url, 1, 500), in byte order: exactly the expression task_run_url_idx indexes."""

    output_field = TextField()

    def as_sql(self, compiler, conn, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"substr({sql}, 1, {URL_KEY_CHARS})", params

    def as_postgresql(self, compiler, conn, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f'(substr({sql}, 1, {URL_KEY_CHARS}) COLLATE "C")', params


def prefix_range(prefix: str) -> tuple[str, str]:
    """[low, high) of every key starting with `prefix` in byte (code point) order."""
    low = prefix[:URL_KEY_CHARS]
    return low, low + "\U0010ffff"


class SearchFilterSet(django_filters.FilterSet):
    """Every list's search box; each list's filterset says what a search means there."""

    q = django_filters.CharFilter(
        method="search", label="Search", max_length=SEARCH_MAX, widget=SearchInput
    )

    def search(self, qs: QuerySet, name: str, value: str) -> QuerySet:
        return qs


class RunFilter(SearchFilterSet):
    dataset = django_filters.CharFilter(
        field_name="dataset__name", max_length=100, widget=TextInput(attrs={"list": "datasets"})
    )
    state = django_filters.ChoiceFilter(
        field_name="acceptance_state", choices=RunState.choices, empty_label="any"
    )
    # The attention page's run conditions (recovery.attention): the same query as its counts.
    needs = django_filters.ChoiceFilter(
        method="filter_needs",
        choices=[(key, attention.DEFINITIONS[key][0].lower()) for key in attention.RUN_CONDITIONS],
        empty_label="anything",
        label="Needs attention",
    )

    class Meta:
        model = Run
        fields: list[str] = []

    def filter_needs(self, qs, name, value):
        return qs.filter(pk__in=attention.runs_needing(value).values("pk"))

    def search(self, qs, name, value):
        # Dataset names are unique and indexed: a prefix range on that index.
        low, high = prefix_range(value)
        return qs.filter(dataset__name__gte=low, dataset__name__lt=high)


class TaskFilter(SearchFilterSet):
    # How the search box reads a URL: its beginning (default; a range of task_run_url_idx) or,
    # on PostgreSQL with the trigram index, any part of it. Removed where it cannot be served.
    match = django_filters.ChoiceFilter(
        method="keep",
        choices=[("contains", "contains")],
        empty_label="begins with",
        label="URL",
    )
    state = django_filters.ChoiceFilter(choices=TaskState.choices, empty_label="any")
    partition = django_filters.CharFilter(max_length=200)
    page_type = django_filters.CharFilter(max_length=64)
    error_class = django_filters.CharFilter(
        field_name="last_error_class", max_length=32, label="Error class"
    )
    # The last attempt's HTTP status, and tasks that took at least N attempts (retries).
    http_status = django_filters.NumberFilter(
        field_name="last_http_status", min_value=100, max_value=599, label="HTTP status"
    )
    attempts = django_filters.NumberFilter(
        field_name="attempt_count", lookup_expr="gte", min_value=0, label="Attempts at least"
    )
    # A recovery batch's tasks (the batch page links here), through task_batch_idx.
    batch = django_filters.NumberFilter(
        field_name="recovery_batch", min_value=1, label="Recovery batch"
    )

    class Meta:
        model = Task
        fields: list[str] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not contains_search(self.queryset.db):
            del self.filters["match"]

    def keep(self, qs, name, value):
        return qs  # read by search()

    def search(self, qs, name, value):
        """URL prefix through task_run_url_idx (without a scheme: after http:// or https://),
        or with match=contains any part of the URL through the trigram index."""
        if "match" in self.filters and self.form.cleaned_data.get("match") == "contains":
            return self._contains(qs, value)
        if "://" in value:
            return self._prefix(qs, value)
        # Without a scheme: the schemes that have a match (one index probe each), so the usual
        # case stays one ordered range scan rather than a union to sort.
        tried = [self._prefix(qs, f"{scheme}://{value}") for scheme in ("https", "http")]
        found = [one for one in tried if one.exists()]
        if not found:
            return tried[0]
        return found[0] if len(found) == 1 else found[0] | found[1]

    @staticmethod
    def _contains(qs, part: str):
        if len(part) < CONTAINS_MIN:
            # No trigram to look up: the index cannot narrow it, so it is refused, not scanned.
            return qs.none()
        # LIKE on the side table, which task_url_trgm_idx serves (an icontains would be
        # UPPER(url) LIKE, which it would not); case-sensitive; \ % and _ are escaped, so text
        # is never a pattern. The sort key is re-annotated as the same value in an expression no
        # btree indexes: otherwise PostgreSQL may walk task_run_url_idx in order hoping to meet
        # matches early, and when the matches sit late in URL order (one host's tasks) it reads
        # most of the run. Read through the trigram index, the cost follows the number of matches.
        pattern = "%" + connections[qs.db].ops.prep_for_like_query(part) + "%"
        found = RawSQL(f"SELECT task_id FROM {URL_SEARCH_TABLE} WHERE url LIKE %s", [pattern])
        return qs.filter(id__in=found).annotate(url_key=UrlKey(Concat("url", Value(""))))

    @staticmethod
    def _prefix(qs, prefix: str):
        low, high = prefix_range(_lower_origin(prefix))
        one = qs.filter(url_key__gte=low, url_key__lt=high)
        if len(prefix) > URL_KEY_CHARS:
            one = one.filter(url__startswith=prefix)
        return one


def _lower_origin(url: str) -> str:
    # Stored URLs are canonical: scheme and host in lower case (recovery.keys.canonical_url).
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}{sep}{host.lower()}{slash}{path}"


class RemoteJobFilter(SearchFilterSet):
    state = django_filters.ChoiceFilter(
        method="filter_state",
        choices=[("any", "any state"), *RemoteJobState.choices],
        empty_label="needs a decision",
    )
    provider = django_filters.CharFilter(max_length=32)
    run = django_filters.NumberFilter(field_name="run_id", min_value=1)
    job = django_filters.NumberFilter(field_name="id", min_value=1, label="Job #")

    class Meta:
        model = RemoteJob
        fields: list[str] = []

    def filter_state(self, qs, name, value):
        return qs if value == "any" else qs.filter(state=value)

    def filter_queryset(self, queryset):
        data = self.form.cleaned_data
        # Default: what needs a decision; a search looks through every state.
        if not data.get("state") and not data.get("q") and not data.get("job"):
            queryset = queryset.filter(state__in=sorted(RECONCILE))
        return super().filter_queryset(queryset)

    def search(self, qs, name, value):
        # Provider job ids are unique per provider: (provider, provider_job_id) index, once per
        # known provider.
        low, high = prefix_range(value)
        return qs.filter(
            provider__in=dataset_providers(), provider_job_id__gte=low, provider_job_id__lt=high
        )


class OutboxFilter(SearchFilterSet):
    state = django_filters.ChoiceFilter(choices=DeliveryState.choices, empty_label="any")
    event_type = django_filters.ChoiceFilter(choices=OutboxEvent.Kind.choices, empty_label="any")
    run = django_filters.NumberFilter(field_name="run_id", min_value=1)
    # The attention page's "failing deliveries": failed or uncertain (recovery.delivery.outbox).
    needs = django_filters.ChoiceFilter(
        method="filter_needs",
        choices=[(attention.FAILING_DELIVERIES, "failed or uncertain")],
        empty_label="anything",
        label="Needs attention",
    )

    class Meta:
        model = OutboxEvent
        fields: list[str] = []

    def filter_needs(self, qs, name, value):
        return qs.filter(outbox.failing_q())

    def search(self, qs, name, value):
        # Event ids are the primary key: a pasted id (or its first characters) is a range on it.
        hexdigits = value.replace("-", "").lower()
        if not re.fullmatch(r"[0-9a-f]{1,32}", hexdigits):
            return qs.none()
        low = hexdigits.ljust(32, "0")
        high = hexdigits.ljust(32, "f")
        return qs.filter(pk__gte=_uuid(low), pk__lte=_uuid(high))


def _uuid(hex32: str) -> str:
    return f"{hex32[:8]}-{hex32[8:12]}-{hex32[12:16]}-{hex32[16:20]}-{hex32[20:]}"


class WorkerFilter(SearchFilterSet):
    # recovery.ops.liveness defines each status; blank shows the processes that may still run.
    status = django_filters.ChoiceFilter(
        method="filter_status",
        choices=[*liveness.Status.choices, ("all", "any, gone too")],
        empty_label="alive or stale",
        label="Status",
    )
    kind = django_filters.ChoiceFilter(choices=liveness.WorkerKind.choices, empty_label="any")

    class Meta:
        model = WorkerHeartbeat
        fields: list[str] = []

    def filter_status(self, qs, name, value):
        return qs if value == "all" else qs.filter(liveness.status_q(value))

    def filter_queryset(self, queryset):
        if not self.form.cleaned_data.get("status") and not self.form.cleaned_data.get("q"):
            queryset = queryset.exclude(liveness.status_q(liveness.Status.GONE))
        return super().filter_queryset(queryset)

    def search(self, qs, name, value):
        low, high = prefix_range(value)
        return qs.filter(worker__gte=low, worker__lt=high)


class AuditFilter(SearchFilterSet):
    actor = django_filters.CharFilter(max_length=150)
    action = django_filters.CharFilter(max_length=64)
    object_type = django_filters.CharFilter(max_length=64)
    object_id = django_filters.CharFilter(max_length=100)

    class Meta:
        model = AuditEntry
        fields: list[str] = []

    def search(self, qs, name, value):
        # The log is read newest first through its `at` index; a search narrows that scan.
        return qs.filter(reason__icontains=value)


class DatasetFilter(SearchFilterSet):
    class Meta:
        model = Dataset
        fields: list[str] = []

    def search(self, qs, name, value):
        low, high = prefix_range(value)
        return qs.filter(name__gte=low, name__lt=high)


class IncidentFilter(SearchFilterSet):
    """The Incidents list: provider error answers kept whole (recovery.ops.incidents)."""

    provider = django_filters.CharFilter(max_length=32)
    source = django_filters.ChoiceFilter(choices=Incident.Source.choices, empty_label="any")
    status = django_filters.NumberFilter(
        field_name="http_status", min_value=100, max_value=599, label="HTTP status"
    )
    run = django_filters.NumberFilter(field_name="run_id", min_value=1)
    job = django_filters.NumberFilter(field_name="remote_job_id", min_value=1, label="Job #")

    class Meta:
        model = Incident
        fields: list[str] = []

    def search(self, qs, name, value):
        # Incidents are few (terminal answers only): words of the detail or the endpoint narrow
        # the newest-first scan of incident_time_idx.
        return qs.filter(Q(detail__icontains=value) | Q(endpoint__icontains=value))


class ScheduleFilter(SearchFilterSet):
    """The Schedules list. Schedules are few (one per recurring collection): the paused and
    overdue filters narrow the ordered scan rather than choose an index of their own."""

    # The dataset page's link (?dataset=<name>): that dataset's schedules, exactly.
    dataset = django_filters.CharFilter(field_name="dataset__name", max_length=100)
    paused = django_filters.ChoiceFilter(
        method="filter_paused", choices=[("yes", "paused"), ("no", "active")], empty_label="any"
    )
    # The attention page's link: recovery.attention's definition, the same rows as its count.
    needs = django_filters.ChoiceFilter(
        method="filter_needs",
        choices=[(attention.OVERDUE_SCHEDULES, "overdue")],
        empty_label="anything",
        label="Needs attention",
    )

    class Meta:
        model = Schedule
        fields: list[str] = []

    def filter_paused(self, qs, name, value):
        return qs.filter(paused=value == "yes")

    def filter_needs(self, qs, name, value):
        return qs.filter(pk__in=[s.pk for s, _at, _window in attention.overdue_schedules()])

    def search(self, qs, name, value):
        # The beginning of the dataset's name (a range of the dataset name index) or of the
        # schedule's name (a range of schedule_name_idx when sorted by name; in dataset order
        # it narrows the ordered walk, which reads at most every schedule: they are few).
        low, high = prefix_range(value)
        datasets = Dataset.objects.filter(name__gte=low, name__lt=high).values("pk")
        return qs.filter(Q(dataset__in=datasets) | Q(name__gte=low, name__lt=high))
