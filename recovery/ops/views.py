"""Health and readiness for load balancers and supervisors; metrics for Prometheus."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

if TYPE_CHECKING:
    from recovery.ops.metrics import Section


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    # Liveness only: the process answers. It must not touch the database, or a database
    # outage would make every web process look dead and get restarted for nothing.
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any database error means "not ready"
        return JsonResponse({"status": "unavailable", "error": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ready"})


@require_GET
def metrics(request: HttpRequest, sections: Iterable[Section] = ()) -> HttpResponse:
    # Prometheus text; counts and names only (recovery.ops.metrics), optionally token-guarded.
    # `sections`: the higher wings' series, passed in by the root URL conf (recovery.urls).
    from recovery.ops import metrics as prometheus

    if not prometheus.authorised(request.headers.get("Authorization", "")):
        return HttpResponse("unauthorised\n", status=401, content_type="text/plain")
    return HttpResponse(
        prometheus.render(sections), content_type="text/plain; version=0.0.4; charset=utf-8"
    )
