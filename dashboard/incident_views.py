"""Incidents: provider error answers kept whole (recovery.ops.incidents), listed like the other
lists (filters, keyset pages, CSV) and each shown on its own page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard import lists
from recovery.models import Incident


@login_required
@require_GET
@permission_required("recovery.view_incident", raise_exception=True)
def incidents(request: HttpRequest, export: bool = False) -> HttpResponse | StreamingHttpResponse:
    qs = Incident.objects.select_related("run__dataset")
    if export:
        return lists.export_csv(request, lists.INCIDENTS, qs, "incidents")
    listing = lists.bind(request, lists.INCIDENTS, qs)
    return render(request, "dashboard/incidents.html", {"listing": listing}, status=listing.status)


@login_required
@require_GET
@permission_required("recovery.view_incident", raise_exception=True)
def incident_detail(request: HttpRequest, incident_id: int) -> HttpResponse:
    incident = get_object_or_404(
        Incident.objects.select_related("run__dataset", "remote_job", "task"), pk=incident_id
    )
    return render(request, "dashboard/incident_detail.html", {"incident": incident})
