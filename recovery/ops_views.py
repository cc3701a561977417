"""Health and readiness for load balancers and supervisors."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
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
