"""Dashboard lists, declared once: a queryset + a filterset + sorts + a search + a keyset pager.

A view binds a `ListSpec` to its base queryset with `bind()` and renders the `Listing`; the page,
its pager links, its sort headers and its filter links all read the same GET parameters, so a
filter is kept when paging and dropped from nothing. Each sort is an order an index serves (the
schema comment on each index names the list), and the keyset cursor follows the sort.

Search (`q`): an exact key goes straight to its object (a task key or observation key anywhere,
and inside a run a URL, an entity key or a provider job id); otherwise each list narrows by its
own indexed search (a run's tasks by URL prefix, or with match=contains on PostgreSQL by any part
of the URL; the reconcile queue by provider job id prefix).

Export: each list's CSV (`<list URL>.csv`, the same view with `export=True`) is the same bound
filterset in the same order, read keyset page by keyset page, so it holds exactly the rows the
pager walks through and memory stays flat however many rows match.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import django_filters
from django.core.exceptions import BadRequest
from django.db import connections
from django.db.models import Func, QuerySet, TextField, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Concat
from django.forms import SearchInput, TextInput
from django.http import HttpRequest, QueryDict, StreamingHttpResponse
from django.urls import NoReverseMatch, reverse

from dashboard import keyset
from recovery import keys, liveness
from recovery.exports import neutralise
from recovery.models import (
    AuditEntry,
    Dataset,
    Observation,
    OutboxEvent,
    RemoteJob,
    Run,
    Task,
    WorkerHeartbeat,
)
from recovery.states.delivery import DeliveryState
from recovery.states.remote_job import RECONCILE, RemoteJobState
from recovery.states.run import RunState
from recovery.states.task import TaskState

# The URL sort/search key: the first URL_KEY_CHARS characters in byte order. A btree entry must
# stay under ~2.7 kB and a URL may be up to 8 kB; byte order ("C" collation) is what makes one
# index serve both ORDER BY and a prefix range. Index: task_run_url_idx (Task.Meta, migrations
# 0006 and 0011).
URL_KEY_CHARS = 500
HEX_KEY = re.compile(r"[0-9a-f]{64}")
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


class BadList(BadRequest):
    """A sort or parameter this list cannot use (answered with 400, naming it)."""


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


# --- filtersets ------------------------------------------------------------------------------


def _blank(choices) -> list[tuple[str, str]]:
    return [(value, label) for value, label in choices]


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
        field_name="acceptance_state", choices=_blank(RunState.choices), empty_label="any"
    )

    class Meta:
        model = Run
        fields: list[str] = []

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
    state = django_filters.ChoiceFilter(choices=_blank(TaskState.choices), empty_label="any")
    partition = django_filters.CharFilter(max_length=200)
    page_type = django_filters.CharFilter(max_length=64)
    error_class = django_filters.CharFilter(
        field_name="last_error_class", max_length=32, label="Error class"
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
            provider__in=_providers(), provider_job_id__gte=low, provider_job_id__lt=high
        )


class OutboxFilter(SearchFilterSet):
    state = django_filters.ChoiceFilter(choices=_blank(DeliveryState.choices), empty_label="any")
    event_type = django_filters.ChoiceFilter(
        choices=_blank(OutboxEvent.Kind.choices), empty_label="any"
    )
    run = django_filters.NumberFilter(field_name="run_id", min_value=1)

    class Meta:
        model = OutboxEvent
        fields: list[str] = []

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
    # recovery.liveness defines each status; blank shows the processes that may still run.
    status = django_filters.ChoiceFilter(
        method="filter_status",
        choices=[*liveness.Status.choices, ("all", "any, gone too")],
        empty_label="alive or stale",
        label="Status",
    )
    kind = django_filters.ChoiceFilter(
        choices=_blank(liveness.WorkerKind.choices), empty_label="any"
    )

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


# --- exact keys: straight to the object ------------------------------------------------------


def find_key(value: str, run: Run | None = None) -> str | None:
    """The page of the object an exact key names, or None.

    Every lookup is a unique-index probe: task_key, observation_key, (provider, provider_job_id);
    inside a run also a URL (its task keys, one per page type) and an entity key (its
    observation key).
    """
    value = value.strip()
    if HEX_KEY.fullmatch(value):
        task_id = Task.objects.filter(task_key=value).values_list("pk", flat=True).first()
        if task_id is None:
            task_id = (
                Observation.objects.filter(observation_key=value)
                .values_list("source_task_id", flat=True)
                .first()
            )
        if task_id is not None:
            return reverse("dashboard:task", args=[task_id])
    job = (
        RemoteJob.objects.filter(provider__in=_providers(), provider_job_id=value)
        .values_list("pk", "state", "attempt__task_id")
        .first()
    )
    if job is not None:
        return reverse("dashboard:task", args=[job[2]])
    if run is None:
        return None
    dataset = run.dataset.name
    if "://" in value:
        try:
            canonical = keys.canonical_url(value)
        except ValueError:
            canonical = None
        if canonical:
            page_types = sorted((run.dataset.spec or {}).get("page_types", {}) or ["page"])
            candidates = [
                keys.task_key_from_canonical(dataset, canonical, run.window, p) for p in page_types
            ]
            task_ids = list(
                Task.objects.filter(task_key__in=candidates).values_list("pk", flat=True)[:2]
            )
            if len(task_ids) == 1:
                return reverse("dashboard:task", args=[task_ids[0]])
    observation = keys.observation_key(dataset, value, run.window)
    task_id = (
        Observation.objects.filter(observation_key=observation)
        .values_list("source_task_id", flat=True)
        .first()
    )
    if task_id is not None:
        return reverse("dashboard:task", args=[task_id])
    return None


def _providers() -> list[str]:
    # A remote job's provider is its dataset's: the few distinct values of the small dataset
    # table let the (provider, provider_job_id) unique index serve a search by job id alone.
    return sorted(set(Dataset.objects.values_list("provider", flat=True)[:1000]))


# --- lists -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sort:
    label: str
    order: keyset.Order
    # Filters that must be set for an index to serve this order (id order needs one state).
    requires: tuple[str, ...] = ()

    def usable(self, params: QueryDict) -> bool:
        return all(params.get(name) for name in self.requires)


@dataclass(frozen=True)
class Column:
    """One CSV column: its header and the row attribute path it reads ("run.dataset.name")."""

    header: str
    path: str

    def value(self, row: Any) -> str:
        value = row
        for part in self.path.split("."):
            value = getattr(value, part, None) if value is not None else None
        if value is None:
            return ""
        if hasattr(value, "isoformat"):
            return value.isoformat()
        return neutralise(str(value))


@dataclass(frozen=True)
class ListSpec:
    name: str
    filterset: type[SearchFilterSet]
    sorts: dict[str, Sort]  # by `?sort=` value; the first is the default
    columns: tuple[Column, ...]  # the CSV export's columns
    prepare: Callable[[QuerySet], QuerySet] | None = None  # annotations the sorts need
    search_help: str = "search"
    jump: bool = True  # an exact key in `q` redirects to its object
    # The default order for the current filters (None: the first usable sort).
    pick_default: Callable[[QueryDict], str] | None = None

    def default_sort(self, params: QueryDict) -> str:
        """The order an index serves best for the current filters."""
        if self.pick_default is not None:
            return self.pick_default(params)
        return next(name for name, sort in self.sorts.items() if sort.usable(params))


@dataclass
class Listing:
    spec: ListSpec
    params: QueryDict
    filterset: SearchFilterSet
    sort: str
    rows: list[Any] = field(default_factory=list)
    next_cursor: str = ""
    redirect: str | None = None
    status: int = 200
    export_path: str = ""  # this list's CSV URL ("" when it has none)

    @property
    def form(self):
        return self.filterset.form

    @property
    def url_contains(self) -> bool:
        """Whether this database searches URLs by any part (else by their beginning)."""
        return contains_search(self.filterset.queryset.db)

    @property
    def q(self) -> str:
        return self.params.get("q", "")

    def href(self, **changes: str | None) -> str:
        """This list's URL with `changes` applied (None drops a key); always one leading `?`."""
        params = self.params.copy()
        for key, value in changes.items():
            if value is None or value == "":
                params.pop(key, None)
            else:
                params[key] = value
        encoded = params.urlencode()
        return f"?{encoded}" if encoded else "?"

    @property
    def default_sort(self) -> str:
        return self.spec.default_sort(self.params)

    def can_sort(self, column: str) -> bool:
        return any(
            name in self.spec.sorts and self.spec.sorts[name].usable(self.params)
            for name in (column, f"-{column}")
        )

    def sort_href(self, column: str) -> str:
        """The header link: ascending first, then the opposite of the current order."""
        target = f"-{column}" if self.sort == column else column
        if target not in self.spec.sorts:
            target = column if column in self.spec.sorts else f"-{column}"
        return self.href(sort=target, after=None)

    def sort_arrow(self, column: str) -> str:
        if self.sort == column:
            return "▲"
        if self.sort == f"-{column}":
            return "▼"
        return ""

    @property
    def next_href(self) -> str:
        return self.href(after=self.next_cursor) if self.next_cursor else ""

    @property
    def first_href(self) -> str:
        return self.href(after=None) if self.params.get("after") else ""

    @property
    def export_href(self) -> str:
        """The CSV of what the list shows: every page of it, so without the page cursor."""
        if not self.export_path:
            return ""
        return self.export_path + self.href(after=None).rstrip("?")

    def rows_for_export(self, chunk: int = 500) -> Iterator[Any]:
        """Every row of the bound filterset in the list's order, one keyset page at a time."""
        order = self.spec.sorts[self.sort].order
        after = None
        while True:
            page = keyset.page(self.filterset.qs, after, order=order, size=chunk)
            yield from page.rows
            if not page.next_cursor:
                return
            after = page.next_cursor

    def csv_lines(self) -> Iterator[str]:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([column.header for column in self.spec.columns])
        for count, row in enumerate(self.rows_for_export(), 1):
            writer.writerow([column.value(row) for column in self.spec.columns])
            if count % 500 == 0:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        yield buffer.getvalue()


def bind(
    request: HttpRequest,
    spec: ListSpec,
    queryset: QuerySet,
    run: Run | None = None,
    *,
    export: bool = False,
) -> Listing:
    """Filter, search, sort and page `queryset` as the request's GET parameters say.

    With `export` nothing is read yet and an exact key does not redirect: `export_csv` streams
    every row the filters and search select, in the list's order.
    """
    params = request.GET.copy()
    # Blank parameters (an empty filter box) are dropped so links never carry `key=`.
    for key in [k for k, v in params.lists() if not any(v)]:
        del params[key]
    sort = params.get("sort") or spec.default_sort(params)
    if sort not in spec.sorts:
        raise BadList(f"unknown sort {sort!r} (known: {', '.join(spec.sorts)})")
    if not spec.sorts[sort].usable(params):
        # E.g. task order kept in the form after its state filter was cleared: no index
        # serves it any more, so the list falls back to its default order.
        sort = spec.default_sort(params)
        params.pop("sort", None)
    if spec.prepare is not None:
        queryset = spec.prepare(queryset)
    filterset = spec.filterset(params, queryset=queryset)
    filterset.form.fields["q"].widget.attrs.update(placeholder=spec.search_help)
    listing = Listing(spec=spec, params=params, filterset=filterset, sort=sort)
    listing.export_path = _export_path(request)
    if not filterset.is_valid():
        listing.status = 400
        return listing
    if export:
        return listing
    q = filterset.form.cleaned_data.get("q") or ""
    if q and spec.jump:
        listing.redirect = find_key(q, run)
        if listing.redirect:
            return listing
    page = keyset.page(filterset.qs, params.get("after"), order=spec.sorts[sort].order)
    listing.rows = page.rows
    listing.next_cursor = page.next_cursor
    return listing


def _export_path(request: HttpRequest) -> str:
    # Each list's CSV route is its page's URL name + "_csv", with the same arguments.
    match = request.resolver_match
    if match is None or not match.view_name:
        return ""
    name = match.view_name if match.view_name.endswith("_csv") else f"{match.view_name}_csv"
    kwargs = {k: v for k, v in match.kwargs.items() if k != "export"}
    try:
        return reverse(name, kwargs=kwargs)
    except NoReverseMatch:
        return ""


def export_csv(
    request: HttpRequest, spec: ListSpec, queryset: QuerySet, filename: str, run: Run | None = None
) -> StreamingHttpResponse:
    """The list's rows as CSV, streamed: the page's filterset, search and order, every page."""
    listing = bind(request, spec, queryset, run=run, export=True)
    if listing.status != 200:
        problems = "; ".join(
            f"{name}: {' '.join(errors)}" for name, errors in listing.form.errors.items()
        )
        raise BadList(f"these filters cannot be used: {problems}")
    response = StreamingHttpResponse(listing.csv_lines(), content_type="text/csv; charset=utf-8")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    response["Content-Disposition"] = f'attachment; filename="{safe}.csv"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _url_key(qs: QuerySet) -> QuerySet:
    return qs.annotate(url_key=UrlKey("url"))


def _newest(label: str = "Newest") -> dict[str, Sort]:
    return {
        "-id": Sort(label, keyset.Order(("id",), descending=True)),
        "id": Sort("Oldest", keyset.Order(("id",), descending=False)),
    }


def _columns(*pairs: str) -> tuple[Column, ...]:
    """Column("a", "a"), ... from "a", "b", or "header=path" where they differ."""
    return tuple(
        Column(*pair.split("=", 1)) if "=" in pair else Column(pair, pair) for pair in pairs
    )


RUNS = ListSpec(
    "runs",
    RunFilter,
    _newest(),
    _columns(
        "id=pk",
        "dataset=dataset.name",
        "window",
        "state=acceptance_state",
        "task_total",
        "scraper_version",
        "created_at",
        "accepted_at",
        "published_at",
    ),
    search_help="dataset name, task key, observation key, job id",
)
# A run's tasks. Each order is one index range scan from the cursor on:
# - one state chosen: task order, task_run_state_idx (run, state, id), or with a partition
#   task_run_part_state_idx (run, partition, state, id);
# - a partition without a state: state then task order, task_run_part_state_idx (a partition's
#   tasks can sit anywhere in URL order, so URL order would read most of the run);
# - otherwise URL order, task_run_url_idx (run, url key, id); state order reads
#   task_run_state_idx.
_BY_ID = {
    "id": Sort("Task", keyset.Order(("id",), descending=False), requires=("state",)),
    "-id": Sort("Task, newest", keyset.Order(("id",), descending=True), requires=("state",)),
}
_BY_URL = {
    "url": Sort("URL", keyset.Order(("url_key", "id"), descending=False)),
    "-url": Sort("URL, descending", keyset.Order(("url_key", "id"), descending=True)),
}
_BY_STATE = {
    "state": Sort("State", keyset.Order(("state", "id"), descending=False)),
    "-state": Sort("State, descending", keyset.Order(("state", "id"), descending=True)),
}


def _task_default(params: QueryDict) -> str:
    if params.get("q"):
        # A search is a URL range (or trigram matches): URL order reads the range in order.
        return "url"
    if params.get("state"):
        return "id"
    return "state" if params.get("partition") else "url"


TASK_COLUMNS = _columns(
    "id=pk",
    "run=run_id",
    "url",
    "state",
    "partition",
    "page_type",
    "attempts=attempt_count",
    "error_class=last_error_class",
    "http_status=last_http_status",
    "state_changed_at",
)
TASKS = ListSpec(
    "tasks",
    TaskFilter,
    {**_BY_URL, **_BY_ID, **_BY_STATE},
    TASK_COLUMNS,
    prepare=_url_key,
    search_help="URL or its beginning, task key, entity key, observation key, job id",
    pick_default=_task_default,
)
# The quarantine page's tasks: its base queryset holds one state, so id order always applies.
QUARANTINE_TASKS = ListSpec(
    "quarantine",
    TaskFilter,
    {
        "id": Sort("Task", keyset.Order(("id",), descending=False)),
        "-id": Sort("Task, newest", keyset.Order(("id",), descending=True)),
        **_BY_URL,
    },
    TASK_COLUMNS,
    prepare=_url_key,
    search_help=TASKS.search_help,
)
RECONCILE_LIST = ListSpec(
    "reconcile",
    RemoteJobFilter,
    _newest(),
    _columns(
        "job=pk",
        "run=run_id",
        "task=attempt.task_id",
        "provider",
        "kind",
        "provider_job_id",
        "state",
        "submitted_at",
        "replaces=replaces_id",
        "resolution",
        "resolved_by",
        "resolved_at",
    ),
    search_help="provider job id",
    jump=False,
)
# Outbox events newest first through outbox_created_idx (created_at, id).
DELIVERIES = ListSpec(
    "deliveries",
    OutboxFilter,
    {
        "-created": Sort("Newest", keyset.Order(("created_at", "id"), descending=True)),
        "created": Sort("Oldest", keyset.Order(("created_at", "id"), descending=False)),
    },
    # Not the destination or payload: a destination URL may carry a credential.
    _columns(
        "event=pk",
        "run=run_id",
        "event_type",
        "state",
        "attempts",
        "created_at",
        "delivered_at",
        "last_error",
    ),
    search_help="event id or its beginning",
    jump=False,
)
# Workers newest first through heartbeat_started_idx (so processes started after a restart
# lead the page), or by name through the unique index on worker.
WORKERS = ListSpec(
    "workers",
    WorkerFilter,
    {
        "-started": Sort("Newest", keyset.Order(("started_at", "id"), descending=True)),
        "started": Sort("Oldest", keyset.Order(("started_at", "id"), descending=False)),
        "worker": Sort("Worker", keyset.Order(("worker",), descending=False)),
        "-worker": Sort("Worker, descending", keyset.Order(("worker",), descending=True)),
    },
    _columns(
        "worker",
        "kind",
        "hostname",
        "pid",
        "started_at",
        "last_seen",
        "stopped_at",
        "claimed",
        "committed",
    ),
    search_help="worker name or its beginning",
    jump=False,
)
# The audit log newest first through the index on `at` (then id).
AUDIT = ListSpec(
    "audit",
    AuditFilter,
    {
        "-at": Sort("Newest", keyset.Order(("at", "id"), descending=True)),
        "at": Sort("Oldest", keyset.Order(("at", "id"), descending=False)),
    },
    _columns("id=pk", "at", "actor", "action", "object_type", "object_id", "reason"),
    search_help="words of the reason",
    jump=False,
)
DATASETS = ListSpec(
    "datasets",
    DatasetFilter,
    {
        "name": Sort("Name", keyset.Order(("name",), descending=False)),
        "-name": Sort("Name, descending", keyset.Order(("name",), descending=True)),
    },
    _columns("name", "provider", "spec_sha256", "auto_accept", "created_at", "updated_at"),
    search_help="dataset name or its beginning",
    jump=False,
)
