"""Dashboard views: thin. Fetch, call one engine function, render or redirect."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from recovery.models import Run


@login_required
def runs(request: HttpRequest) -> HttpResponse:
    latest = Run.objects.select_related("dataset").order_by("-created_at")[:50]
    return render(request, "dashboard/runs.html", {"runs": latest})
