"""The pull API's views: thin, as the dashboard's are. Each checks the token's scope, calls the
engine's reads (recovery.consumers.catalogue, feed) and shapes the answer; `ApiView` writes
one audit entry per request, refusals included, once the status is known."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponseBase, StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import downloads, shapes
from api.errors import ApiError
from recovery.consumers import catalogue, feed, tokens
from recovery.delivery import exports, latest
from recovery.models import Dataset, Run
from recovery.states.run import AVAILABLE

DEFAULT_PAGE = 500

ERRORS = {
    401: OpenApiResponse(shapes.Error, description="No, an unknown, a revoked or an expired token"),
    403: OpenApiResponse(shapes.Error, description="Not an exporter, or outside the scope"),
    404: OpenApiResponse(shapes.Error, description="No such dataset or run"),
    429: OpenApiResponse(shapes.Error, description="Over the token's rate limit"),
}
# A malformed query parameter or cursor; only the operations that take query parameters.
BAD_PARAMETER = {
    400: OpenApiResponse(
        shapes.Error, description="A malformed parameter (invalid_parameter) or cursor"
    )
}


def _file_types(formats: tuple[str, ...] | list[str], *statuses: int) -> dict[Any, Any]:
    return {
        (status, downloads.CONTENT_TYPES[fmt].split(";")[0]): OpenApiTypes.BINARY
        for status in statuses
        for fmt in formats
    }


def _formats(formats: tuple[str, ...] | list[str]) -> OpenApiParameter:
    # Declared, not derived from the URL pattern: drf-spectacular writes the route's group
    # `csv|jsonl|parquet` as the pattern `^csv|jsonl|parquet$`, which is not an enum.
    return OpenApiParameter("fmt", str, OpenApiParameter.PATH, enum=list(formats))


# An export download: revalidation and resumption (api/downloads.py), declared so that clients
# (and tests/db/test_api_fuzz.py) know the headers and the answers they bring.
DOWNLOAD_PARAMETERS = [
    OpenApiParameter(
        "If-None-Match", str, OpenApiParameter.HEADER, description="A previous ETag: 304 if equal."
    ),
    OpenApiParameter(
        "Range", str, OpenApiParameter.HEADER, description="One byte range, `bytes=a-b`: 206."
    ),
    OpenApiParameter(
        "If-Range", str, OpenApiParameter.HEADER, description="Range only if this ETag still holds."
    ),
]
# What a download's response carries (api/downloads.py), on 200, 206 and 304 alike.
_SENT = [200, 206, 304]
DOWNLOAD_HEADERS = [
    OpenApiParameter(
        "ETag", str, OpenApiParameter.HEADER, response=_SENT,
        description="The content's hash: send it back as If-None-Match or If-Range.",
    ),
    OpenApiParameter(
        "Salvage-Rows", int, OpenApiParameter.HEADER, response=_SENT,
        description="The data rows the whole file holds (CSV: lines after the header; JSONL: "
        "lines; Parquet: rows): a saved file holding fewer was cut short.",
    ),
    OpenApiParameter(
        "Salvage-Run", int, OpenApiParameter.HEADER, response=_SENT,
        description="The run the file is the export of.",
    ),
    OpenApiParameter(
        "Accept-Ranges", str, OpenApiParameter.HEADER, response=_SENT,
        description="`bytes`: a cut download resumes with Range.",
    ),
    OpenApiParameter(
        "Content-Range", str, OpenApiParameter.HEADER, response=[206, 416],
        description="The part sent, `bytes a-b/size` (416: `bytes */size`).",
    ),
]  # fmt: skip
VERSION_HEADER = OpenApiParameter(
    "Salvage-Version", int, OpenApiParameter.HEADER, response=[200, 206, 304],
    description="The dataset's version when the download began: ask for changes since it.",
)  # fmt: skip
DOWNLOAD_RESPONSES = {
    **_file_types(exports.FORMATS, 200, 206),
    304: OpenApiResponse(description="Not modified: If-None-Match names the current ETag"),
    409: OpenApiResponse(shapes.Error, description="The export could not be made (export_failed)"),
    416: OpenApiResponse(description="The Range selects nothing of the file"),
    **ERRORS,
}


class ApiView(APIView):
    def finalize_response(
        self, request: Request, response: Any, *args: Any, **kwargs: Any
    ) -> HttpResponseBase:
        response = super().finalize_response(request, response, *args, **kwargs)
        data = getattr(response, "data", None)
        code = ""
        if response.status_code >= 400 and isinstance(data, dict) and "error" in data:
            code = str(data["error"].get("code", ""))
        tokens.record_request(
            getattr(request, "salvage_token", None),
            getattr(request, "salvage_prefix", ""),
            method=request.method or "",
            path=request.get_full_path(),
            status=response.status_code,
            code=code,
        )
        return response

    def dataset(self, request: Request, name: str) -> Dataset:
        dataset = Dataset.objects.filter(name=name).first()
        if dataset is None:
            raise ApiError("not_found", f"no dataset named {name!r}", 404)
        self.in_scope(request, dataset)
        return dataset

    def in_scope(self, request: Request, dataset: Dataset) -> None:
        try:
            tokens.check_scope(request.auth, dataset)
        except tokens.Refused as refused:
            raise exceptions.PermissionDenied(refused.message, code=refused.code) from None

    def links(self, request: Request, route: str, **kwargs: Any) -> dict[str, str]:
        return {
            fmt: request.build_absolute_uri(reverse(route, kwargs={**kwargs, "fmt": fmt}))
            for fmt in exports.FORMATS
        }

    def run_object(self, request: Request, run: Run) -> dict[str, Any]:
        return {
            **catalogue.run_object(run),
            "exports": self.links(request, "api:run_export", run_id=run.pk),
        }

    def dataset_object(self, request: Request, dataset: Dataset) -> dict[str, Any]:
        found = catalogue.dataset_object(dataset)
        current = exports.current_run(dataset.name)
        if current is not None:
            found["current_run"] = self.run_object(request, current)
        found["current"] = self.links(request, "api:current", name=dataset.name)
        return found


# What `_number` accepts, for the document: up to 18 digits, so no sign and no overflow.
WHOLE = {"type": "integer", "minimum": 0, "maximum": 10**18 - 1}


def _up_to(most: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": most}


def _number(request: Request, name: str, default: int | None, *, most: int | None = None) -> Any:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 18:
        raise ApiError("invalid_parameter", f"{name}: expected a whole number, got {text!r}")
    value = int(text)
    if most is not None and not 1 <= value <= most:
        raise ApiError("invalid_parameter", f"{name}: expected 1 to {most}, got {value}")
    return value


class DatasetList(ApiView):
    @extend_schema(
        responses={200: shapes.DatasetList, **ERRORS},
        summary="Datasets",
        operation_id="datasets_list",
    )
    def get(self, request: Request) -> Response:
        """The datasets this token may read, each with its version and current run."""
        feed.sequence()
        datasets = tokens.scoped_datasets(request.auth).order_by("name")
        return Response({"datasets": [self.dataset_object(request, ds) for ds in datasets]})


class DatasetDetail(ApiView):
    @extend_schema(
        responses={200: shapes.DatasetObject, **ERRORS},
        summary="A dataset",
        operation_id="dataset_retrieve",
    )
    def get(self, request: Request, name: str) -> Response:
        """The dataset's current accepted run (rows, published time, partial-result marks),
        its version and the links to its exports."""
        dataset = self.dataset(request, name)
        feed.sequence()
        return Response(self.dataset_object(request, dataset))


class DatasetRuns(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("before", WHOLE, description="Runs with an id below this."),
            OpenApiParameter(
                "limit", _up_to(DEFAULT_PAGE), description=f"At most this many (1-{DEFAULT_PAGE})."
            ),
        ],
        responses={200: shapes.RunList, **BAD_PARAMETER, **ERRORS},
        summary="A dataset's accepted runs",
    )
    def get(self, request: Request, name: str) -> Response:
        """Its accepted and published runs, newest first."""
        dataset = self.dataset(request, name)
        limit = _number(request, "limit", 50, most=DEFAULT_PAGE)
        found, before = catalogue.runs(
            dataset, before=_number(request, "before", None), limit=limit
        )
        following = None
        if before is not None:
            path = reverse("api:runs", kwargs={"name": name})
            following = request.build_absolute_uri(f"{path}?before={before}&limit={limit}")
        return Response(
            {
                "dataset": dataset.name,
                "runs": [self.run_object(request, run) for run in found],
                "next": following,
            }
        )


class RunDetail(ApiView):
    @extend_schema(responses={200: shapes.RunObject, **ERRORS}, summary="A run")
    def get(self, request: Request, run_id: int) -> Response:
        """One accepted or published run."""
        return Response(self.run_object(request, self.run(request, run_id)))

    def run(self, request: Request, run_id: int) -> Run:
        run = Run.objects.select_related("dataset").filter(pk=run_id).first()
        if run is None or run.acceptance_state not in AVAILABLE:
            raise ApiError("not_found", f"no accepted run {run_id}", 404)
        self.in_scope(request, run.dataset)
        return run


class RunExport(RunDetail):
    @extend_schema(
        parameters=[
            OpenApiParameter("run_id", int, OpenApiParameter.PATH),
            _formats(exports.FORMATS),
            *DOWNLOAD_PARAMETERS,
            *DOWNLOAD_HEADERS,
        ],
        responses=DOWNLOAD_RESPONSES,
        summary="A run's export",
        operation_id="run_export",
    )
    def get(self, request: Request, run_id: int, fmt: str) -> HttpResponseBase:  # type: ignore[override]
        """The run's export: streamed; ETag and If-None-Match (304); Range (206)."""
        return downloads.respond(request, self.run(request, run_id), fmt, {})


class CurrentExport(ApiView):
    @extend_schema(
        parameters=[
            _formats(exports.FORMATS),
            *DOWNLOAD_PARAMETERS,
            *DOWNLOAD_HEADERS,
            VERSION_HEADER,
        ],
        responses=DOWNLOAD_RESPONSES,
        summary="The current run's export",
        operation_id="dataset_current_export",
    )
    def get(self, request: Request, name: str, fmt: str) -> HttpResponseBase:
        """The current run's export: as a run's export, with `Salvage-Version`, the dataset's
        version when the download began (ask for changes since it afterwards)."""
        dataset = self.dataset(request, name)
        feed.sequence()
        version = feed.version(dataset)
        current = exports.current_run(dataset.name)
        if current is None:
            raise ApiError("no_current_run", f"dataset {name} has no accepted run yet", 404)
        return downloads.respond(request, current, fmt, {"Salvage-Version": str(version)})


class LatestExport(ApiView):
    @extend_schema(
        parameters=[
            _formats(latest.FORMATS),
            OpenApiParameter(
                "Salvage-Version",
                int,
                OpenApiParameter.HEADER,
                response=[200],
                description=VERSION_HEADER.description,
            ),
        ],
        responses={**_file_types(latest.FORMATS, 200), 409: DOWNLOAD_RESPONSES[409], **ERRORS},
        summary="Each entity's latest value",
        operation_id="dataset_latest_export",
    )
    def get(self, request: Request, name: str, fmt: str) -> HttpResponseBase:
        """Each entity's latest published value across windows (the current-state view: an
        entity missing from the last window keeps the value of the window before), ordered by
        entity key, streamed; `Salvage-Version` as for the current export."""
        dataset = self.dataset(request, name)
        feed.sequence()
        version = feed.version(dataset)
        try:
            chunks = latest.stream_bytes(dataset.name, fmt)
        except exports.ExportError as exc:  # a Parquet decimal column too wide: before any byte
            raise ApiError("export_failed", str(exc), 409) from None
        response = StreamingHttpResponse(chunks, content_type=downloads.CONTENT_TYPES[fmt])
        response["Content-Disposition"] = f'attachment; filename="{dataset.name}-latest.{fmt}"'
        response["Salvage-Version"] = str(version)
        return response


class DatasetRows(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after", str, description="The `next` cursor of the last page."),
            OpenApiParameter("run", WHOLE, description="Start on this run (default: current)."),
            OpenApiParameter(
                "limit",
                _up_to(catalogue.MAX_PAGE),
                description=f"Rows per page (1-{catalogue.MAX_PAGE}).",
            ),
        ],
        responses={200: shapes.RowsPage, **BAD_PARAMETER, **ERRORS},
        summary="Rows, a page at a time",
    )
    def get(self, request: Request, name: str) -> Response:
        """One run's rows in pages; the cursor names its run, so a replacement of the dataset
        during the walk does not change the run being read."""
        dataset = self.dataset(request, name)
        limit = _number(request, "limit", DEFAULT_PAGE, most=catalogue.MAX_PAGE)
        try:
            page = catalogue.rows_page(
                dataset,
                after=request.query_params.get("after") or None,
                run_id=_number(request, "run", None),
                limit=limit,
            )
        except catalogue.CatalogueError as exc:
            raise ApiError("invalid_cursor", str(exc)) from None
        if page is None:
            raise ApiError("no_current_run", f"dataset {name} has no accepted run yet", 404)
        return Response(
            {"dataset": dataset.name, "run": page.run.pk, "rows": page.rows, "next": page.next}
        )


class DatasetChanges(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("since", WHOLE, description="The version you last read (0: all)."),
            OpenApiParameter("limit", _up_to(1000), description="Changes per page (1-1000)."),
        ],
        responses={200: shapes.Changes, **BAD_PARAMETER, **ERRORS},
        summary="Changes since a version",
    )
    def get(self, request: Request, name: str) -> Response:
        """Accepted and published runs and corrected rows since `since`, oldest first."""
        dataset = self.dataset(request, name)
        feed.sequence()
        found = feed.changes(
            dataset,
            _number(request, "since", 0),
            _number(request, "limit", 1000, most=1000),
        )
        return Response(
            {
                "dataset": dataset.name,
                "since": found.since,
                "version": found.version,
                "current_run": found.current_run,
                "changes": found.changes,
                "more": found.more,
                "next_since": found.next_since,
            }
        )


class NotFound(ApiView):
    permission_classes: list[Any] = []

    @extend_schema(exclude=True)
    def get(self, request: Request, rest: str = "") -> Response:
        raise ApiError("not_found", "no such API path (see /api/v1/schema)", 404)
