"""Schedules in the browser: every dataset's recurring collections, their last and next windows
and last error (operators), and pause/resume (admins). Each change goes through the command
line's engine function (recovery.schedules.set_paused), which writes the audit entry."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from recovery import schedules
from recovery.models import Schedule

MAX_ROWS = 500


@login_required
@require_GET
@permission_required("recovery.view_schedule", raise_exception=True)
def schedule_list(request: HttpRequest) -> HttpResponse:
    listed = Schedule.objects.select_related("dataset", "last_run").order_by(
        "dataset__name", "name"
    )[:MAX_ROWS]
    rows = schedules.overview(listed, timezone.now())
    return render(request, "dashboard/schedules.html", {"rows": rows})


@login_required
@require_POST
@permission_required("recovery.change_schedule", raise_exception=True)
def schedule_toggle(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule.objects.select_related("dataset"), pk=schedule_id)
    pause = not schedule.paused
    reason = request.POST.get("reason", "")[:500]
    changed = schedules.set_paused(
        schedule.dataset.name,
        schedule.name,
        pause,
        actor=request.user.get_username(),
        reason=reason,
    )
    state = "paused" if pause else "resumed"
    messages.success(request, f"Schedule {schedule} {state}." if changed else "No change.")
    return redirect("dashboard:schedules")
