"""Dashboard lists, declared once: a queryset + a filterset + sorts + a keyset pager + CSV columns.

A view binds a `ListSpec` to its base queryset with `bind()` and renders the `Listing`; the page,
its pager links, its sort headers and its filter links all read the same GET parameters, so a
filter is kept when paging and dropped from nothing. Each sort is an order an index serves (the
schema comment on each index names the list), and the keyset cursor follows the sort.

Pages: `after` or `before` a keyset cursor (dashboard.keyset), `size` rows among PAGE_SIZES, and
"N matching" counted only up to COUNT_CAP (dashboard.keyset.capped_count), so no list ever counts
a million-row run to the end.

Search (`q`): an exact key goes straight to its object (dashboard.keysearch); otherwise each list
narrows by its own indexed search (its filterset, dashboard.filtersets).

Export: each list's CSV (`<list URL>.csv`, the same view with `export=True`) is the same bound
filterset in the same order, read keyset page by keyset page, so it holds exactly the rows the
pager walks through and memory stays flat however many rows match. Its last line,
`# complete: N rows`, says it arrived whole (`trailer`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import BadRequest
from django.db.models import F, QuerySet
from django.http import HttpRequest, QueryDict, StreamingHttpResponse
from django.urls import NoReverseMatch, reverse

from dashboard import keyset
from dashboard.filtersets import (
    AuditFilter,
    DatasetFilter,
    IncidentFilter,
    OutboxFilter,
    RemoteJobFilter,
    RunFilter,
    ScheduleFilter,
    SearchFilterSet,
    TaskFilter,
    UrlKey,
    WorkerFilter,
    contains_search,
)
from dashboard.keysearch import find_key
from recovery.delivery.exports import neutralise
from recovery.intake.schedules import public_text
from recovery.models import Run, Task
from recovery.models.tasks import HttpStatusKey


class BadList(BadRequest):
    """A sort or parameter this list cannot use (answered with 400, naming it)."""


# The page sizes a list offers (`?size=`); keyset.PAGE_SIZE when none is given.
PAGE_SIZES = (25, 50, 100, 200)
# "N matching" is counted up to this many rows, then shown as "more than COUNT_CAP": the count
# reads at most COUNT_CAP + 1 entries of the index the page itself reads (keyset.capped_count).
# Measured on PostgreSQL 15 (a busy 2-core box), warm, a run of 100,000 tasks after another of
# 100,000 (bench/dashboard.py's generate, ANALYZEd), EXPLAIN ANALYZE of the count: a run's whole
# task list in URL order 13-23 ms (Index Scan of task_run_url_idx stopped by the LIMIT, 10,001
# heap rows); in state order 5 ms (Index Only Scan of task_run_state_idx); a state or partition
# filter 2 ms (their indexes, index-only); a URL prefix 0.3 ms, a URL "contains" search 3-4 ms
# (the trigram index, then a sort of the few matches). No sequential scan of recovery_task.
COUNT_CAP = 10_000
# Parameters that choose a page, not rows: the export drops them (it writes every row).
PAGE_PARAMS = ("after", "before", "size")


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
    # What a page would show of a free-text value (credentials removed), where it needs it.
    clean: Callable[[str], str] | None = None

    def value(self, row: Any) -> str:
        value = row
        for part in self.path.split("."):
            value = getattr(value, part, None) if value is not None else None
        if value is None:
            return ""
        if hasattr(value, "isoformat"):
            return value.isoformat()
        text = str(value)
        if self.clean is not None:
            text = self.clean(text)
        return neutralise(text)


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
    # Parameters the view reads itself, beside the filterset's, the sort and the pager's.
    view_params: tuple[str, ...] = ()

    def known_params(self) -> set[str]:
        return {"sort", *PAGE_PARAMS, *self.filterset.base_filters, *self.view_params}

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
    prev_cursor: str = ""
    size: int = keyset.PAGE_SIZE
    # Rows the filters and search select, counted up to COUNT_CAP (None: not counted).
    matching: int | None = None
    matching_capped: bool = False
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
        return self.href(sort=target, after=None, before=None)

    def sort_arrow(self, column: str) -> str:
        if self.sort == column:
            return "▲"
        if self.sort == f"-{column}":
            return "▼"
        return ""

    @property
    def next_href(self) -> str:
        return self.href(after=self.next_cursor, before=None) if self.next_cursor else ""

    @property
    def prev_href(self) -> str:
        return self.href(before=self.prev_cursor, after=None) if self.prev_cursor else ""

    @property
    def first_href(self) -> str:
        paged = self.params.get("after") or self.params.get("before")
        return self.href(after=None, before=None) if paged else ""

    def size_href(self, size: int) -> str:
        """This list from its first page, `size` rows a page (the default leaves no `size=`)."""
        value = "" if size == keyset.PAGE_SIZE else str(size)
        return self.href(size=value, after=None, before=None)

    @property
    def size_links(self) -> list[tuple[int, str]]:
        """(size, link) for each page size; the link is "" for the current one."""
        return [(n, "" if n == self.size else self.size_href(n)) for n in PAGE_SIZES]

    @property
    def matching_text(self) -> str:
        if self.matching is None:
            return ""
        if self.matching_capped:
            return f"more than {self.matching:,} matching"
        return f"{self.matching:,} matching"

    @property
    def export_href(self) -> str:
        """The CSV of what the list shows: every page of it, so without the page parameters."""
        if not self.export_path:
            return ""
        return self.export_path + self.href(**dict.fromkeys(PAGE_PARAMS)).rstrip("?")

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
        count = 0
        for count, row in enumerate(self.rows_for_export(), 1):
            writer.writerow([column.value(row) for column in self.spec.columns])
            if count % 500 == 0:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
        buffer.write(trailer(count))
        yield buffer.getvalue()


# The last line of every list CSV. A list is live (its rows change while it streams), so no
# count can be sent before the rows; the trailer counts what was written, and a saved file
# without it was cut short. Readers skip it as a comment (pandas: comment="#").
TRAILER = "# complete: {rows} rows\n"


def trailer(rows: int) -> str:
    return TRAILER.format(rows=rows)


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
    # A parameter no list reads would be silently ignored, and the page would show rows its
    # address says it does not: a typo or a stale link is refused, naming it.
    unknown = sorted(set(params) - spec.known_params())
    if unknown:
        known = ", ".join(sorted(spec.known_params()))
        raise BadList(f"unknown parameter {unknown[0]!r} for this list (known: {known})")
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
    listing.size = _page_size(params)
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
    page = keyset.page(
        filterset.qs,
        params.get("after"),
        before=params.get("before"),
        order=spec.sorts[sort].order,
        size=listing.size,
    )
    listing.rows = page.rows
    listing.next_cursor = page.next_cursor
    listing.prev_cursor = page.prev_cursor
    listing.matching, listing.matching_capped = keyset.capped_count(
        filterset.qs, COUNT_CAP, spec.sorts[sort].order
    )
    return listing


def _page_size(params: QueryDict) -> int:
    raw = params.get("size")
    if raw is None:
        return keyset.PAGE_SIZE
    allowed = {str(size): size for size in PAGE_SIZES}
    if raw not in allowed:
        raise BadList(f"unknown page size {raw!r} for 'size' (known: {', '.join(allowed)})")
    return allowed[raw]


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


def _task_keys(qs: QuerySet) -> QuerySet:
    # The two sort keys that are expressions, each exactly the one its index holds.
    return qs.annotate(url_key=UrlKey("url"), http_key=HttpStatusKey("last_http_status"))


def _newest(label: str = "Newest") -> dict[str, Sort]:
    return {
        "-id": Sort(label, keyset.Order(("id",), descending=True)),
        "id": Sort("Oldest", keyset.Order(("id",), descending=False)),
    }


def _columns(*pairs: str) -> tuple[Column, ...]:
    """Column("a", "a"), ... from "a", "b", or "header=path" where they differ."""
    return tuple(
        Column(header, path or header)
        for header, _, path in (pair.partition("=") for pair in pairs)
    )


def _dataset_name(qs: QuerySet) -> QuerySet:
    return qs.annotate(dataset_name=F("dataset__name"))


# Runs newest first by the primary key; by window through run_window_idx (window, id); by
# creation through run_created_idx (created_at, id). By dataset name then window (unique
# together: dataset names are unique, and so is a window in its dataset) the name is the
# dataset's, not a column of the run, so no index of recovery_run holds the order: PostgreSQL
# reads the dataset name index in order and sorts one dataset's runs at a time (an incremental
# sort), so a page costs about one dataset's runs (EXPLAIN ANALYZE, 40 datasets of 2,500 runs:
# 5 ms a page, against 0.1 ms by window or creation).
RUNS = ListSpec(
    "runs",
    RunFilter,
    {
        **_newest(),
        "dataset": Sort("Dataset", keyset.Order(("dataset_name", "window"), descending=False)),
        "-dataset": Sort("Dataset, descending", keyset.Order(("dataset_name", "window"))),
        "window": Sort("Window", keyset.Order(("window", "id"), descending=False)),
        "-window": Sort("Window, descending", keyset.Order(("window", "id"))),
        "created": Sort("Created", keyset.Order(("created_at", "id"), descending=False)),
        "-created": Sort("Created, newest", keyset.Order(("created_at", "id"))),
    },
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
    prepare=_dataset_name,
    search_help="dataset name, task key, observation key, job id",
)
# A run's tasks. Each order is one index range scan from the cursor on:
# - one state chosen: task order, task_run_state_idx (run, state, id), or with a partition
#   task_run_part_state_idx (run, partition, state, id);
# - a partition without a state: state then task order, task_run_part_state_idx (a partition's
#   tasks can sit anywhere in URL order, so URL order would read most of the run);
# - otherwise URL order, task_run_url_idx (run, url key, id); state order reads
#   task_run_state_idx;
# - by attempts, last HTTP status, error class or last state change (a column header's choice,
#   never a default): task_run_attempts_idx (run, attempt_count, id), task_run_http_idx (run,
#   COALESCE(last_http_status, 0), id: a task with no status yet sorts as 0, below every
#   status, since a cursor cannot step over NULL), task_run_error_sort_idx (run,
#   last_error_class, id: no class, "", sorts first) and task_run_changed_idx (run,
#   state_changed_at, id). With a state, partition or error-class filter too, these orders
#   read the same index and skip the rows the filter drops: a page costs what it takes to find
#   its rows in that order, as URL order under a filter does.
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
_BY_COLUMN = {
    "attempts": Sort("Attempts", keyset.Order(("attempt_count", "id"), descending=False)),
    "-attempts": Sort("Attempts, most first", keyset.Order(("attempt_count", "id"))),
    "http": Sort("HTTP status", keyset.Order(("http_key", "id"), descending=False)),
    "-http": Sort("HTTP status, descending", keyset.Order(("http_key", "id"))),
    "error_class": Sort("Error class", keyset.Order(("last_error_class", "id"), descending=False)),
    "-error_class": Sort("Error class, descending", keyset.Order(("last_error_class", "id"))),
    "changed": Sort("Changed", keyset.Order(("state_changed_at", "id"), descending=False)),
    "-changed": Sort("Changed, newest", keyset.Order(("state_changed_at", "id"))),
}


def _task_default(params: QueryDict) -> str:
    if params.get("q"):
        # A search is a URL range (or trigram matches): URL order reads the range in order.
        return "url"
    if params.get("state") or params.get("batch"):
        return "id"  # a batch's tasks: a few, read through task_batch_idx, then in id order
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


def task_rows(run: Run) -> QuerySet:
    """A run's tasks, reading only the fields the task lists show and export."""
    return Task.objects.filter(run=run).only(
        "pk",
        "run_id",
        "url",
        "state",
        "partition",
        "page_type",
        "attempt_count",
        "last_error_class",
        "last_http_status",
        "state_changed_at",
    )


TASKS = ListSpec(
    "tasks",
    TaskFilter,
    {**_BY_URL, **_BY_ID, **_BY_STATE, **_BY_COLUMN},
    TASK_COLUMNS,
    prepare=_task_keys,
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
    view_params=("state",),  # quarantined (default) or dead: the view picks the base rows
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
# Incidents newest first through incident_time_idx (occurred_at, id); a provider or a run
# filter reads incident_provider_idx or incident_run_idx in the same order.
INCIDENTS = ListSpec(
    "incidents",
    IncidentFilter,
    {
        "-at": Sort("Newest", keyset.Order(("occurred_at", "id"), descending=True)),
        "at": Sort("Oldest", keyset.Order(("occurred_at", "id"), descending=False)),
    },
    _columns(
        "incident=pk",
        "occurred_at",
        "provider",
        "source",
        "outcome",
        "http_status",
        "method",
        "endpoint",
        "run=run_id",
        "job=remote_job_id",
        "attempt=attempt_id",
        "task=task_id",
        "detail",
        "body_truncated",
        "response_body",
    ),
    search_help="words of the detail or the endpoint",
    jump=False,
)


# Schedules by dataset name then schedule name (unique together: dataset names are unique, and
# so is a schedule's name in its dataset): the dataset name index in order, then each dataset's
# schedules (on PostgreSQL an incremental sort, one dataset at a time). By schedule name through
# schedule_name_idx (name, id); newest by the primary key.
SCHEDULES = ListSpec(
    "schedules",
    ScheduleFilter,
    {
        "dataset": Sort("Dataset", keyset.Order(("dataset_name", "name"), descending=False)),
        "-dataset": Sort("Dataset, descending", keyset.Order(("dataset_name", "name"))),
        "name": Sort("Schedule", keyset.Order(("name", "id"), descending=False)),
        "-name": Sort("Schedule, descending", keyset.Order(("name", "id"))),
        **_newest(),
    },
    # Not the manifest source: it may be a URL with a user, password or token in it. The last
    # error quotes that URL, so it is exported with the URL's credentials removed.
    (
        *_columns(
            "schedule=pk",
            "dataset=dataset.name",
            "name",
            "kind",
            "at_time",
            "weekday",
            "cron",
            "time_zone",
            "window_format",
            "catch_up",
            "catch_up_max",
            "paused",
            "paused_at",
            "last_window",
            "last_run=last_run_id",
            "failures",
        ),
        Column("last_error", "last_error", clean=public_text),
        *_columns("retry_at", "created_at", "updated_at"),
    ),
    prepare=_dataset_name,
    search_help="dataset or schedule name, or its beginning",
    jump=False,
)
