"""An export over HTTP: streamed, revalidated by ETag, resumed by Range.

- `ETag` is the export's identity (recovery.delivery.export_files.identity: equal tags, equal
  bytes); `If-None-Match` naming it answers 304 with no body.
- The first download of a content streams as the export is made (no Content-Length) and keeps
  the bytes as a file (export_files.tee); later downloads are served from that file with
  `Content-Length`.
- `Range: bytes=a-b` (one range) answers 206 with `Content-Range` from the file, written first
  if it is not there yet (an interrupted first download left none). `If-Range` with another
  tag means the content changed since the first part: the whole file, 200.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from rest_framework.request import Request

from api import ranges
from api.errors import ApiError
from recovery.delivery import export_files, exports, parquet
from recovery.models import Run

CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson",
    "parquet": parquet.CONTENT_TYPE,
}
BLOCK = 64 * 1024


def _file_part(path: Path, first: int, last: int) -> Iterator[bytes]:
    # Opened now: a prune that unlinks the file later cannot cut this read short.
    with open(path, "rb") as handle:
        handle.seek(first)
        left = last - first + 1
        while left > 0:
            block = handle.read(min(BLOCK, left))
            if not block:
                return
            left -= len(block)
            yield block


def respond(request: Request, run: Run, fmt: str, extra: dict[str, str]) -> HttpResponseBase:
    try:
        tag, rows = export_files.fingerprint(run, fmt)
    except exports.ExportError as exc:
        raise ApiError("export_failed", str(exc), 409) from None
    quoted = f'"{tag}"'
    headers = {
        "ETag": quoted,
        "Accept-Ranges": "bytes",
        "Cache-Control": "private, no-cache",
        "Content-Disposition": f'attachment; filename="{exports.filename(run, fmt)}"',
        "X-Content-Type-Options": "nosniff",
        "Salvage-Run": str(run.pk),
        # The file's data rows (CSV lines after the header, JSONL lines, Parquet rows): a
        # saved file that holds fewer was cut short (docs/api.md, "Checking a download").
        "Salvage-Rows": str(rows),
        **extra,
    }
    if ranges.etag_matches(request.headers.get("If-None-Match"), quoted):
        response: HttpResponseBase = HttpResponse(status=304)
        for name, value in headers.items():
            response[name] = value
        return response
    wanted = request.headers.get("Range")
    if_range = request.headers.get("If-Range")
    if if_range and if_range.strip() != quoted:
        wanted = None  # the content changed since the part the client has: send it all
    try:
        path = export_files.cached(run, fmt, tag)
        if path is None and wanted:
            path = export_files.materialise(run, fmt, tag)
        if path is None:
            response = StreamingHttpResponse(
                export_files.tee(run, fmt, tag), content_type=CONTENT_TYPES[fmt]
            )
        else:
            response = _from_file(path, wanted, fmt)
    except exports.ExportError as exc:
        raise ApiError("export_failed", str(exc), 409) from None
    for name, value in headers.items():
        response[name] = value
    return response


def _from_file(path: Path, wanted: str | None, fmt: str) -> HttpResponseBase:
    size = path.stat().st_size
    try:
        part = ranges.parse(wanted, size)
    except ranges.Unsatisfiable:
        refused = HttpResponse(status=416)
        refused["Content-Range"] = f"bytes */{size}"
        return refused
    first, last = part if part is not None else (0, size - 1)
    response = StreamingHttpResponse(
        _file_part(path, first, last),
        status=206 if part is not None else 200,
        content_type=CONTENT_TYPES[fmt],
    )
    response["Content-Length"] = str(max(last - first + 1, 0))
    if part is not None:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    return response
