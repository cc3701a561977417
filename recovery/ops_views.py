"""Health and readiness for load balancers and supervisors."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET


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
def metrics(request: HttpRequest) -> HttpResponse:
    # Prometheus text; counts and state names only (recovery.metrics), optionally token-guarded.
    from recovery import metrics as prometheus

    if not prometheus.authorised(request.headers.get("Authorization", "")):
        return HttpResponse("unauthorised\n", status=401, content_type="text/plain")
    return HttpResponse(
        prometheus.render(), content_type="text/plain; version=0.0.4; charset=utf-8"
    )
