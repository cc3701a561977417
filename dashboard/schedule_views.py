"""Schedules in the browser: every dataset's recurring collections, their last and next windows
and last error (operators); admins add, edit, pause/resume and remove them. Each change is one
call of the command line's engine function (recovery.schedules: create, change, set_paused,
remove), checked by the command's rules and written to the audit log there."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard import engine
from dashboard.forms import ReasonForm
from dashboard.schedule_forms import ScheduleForm
from recovery import confirmations, schedules
from recovery.models import Schedule

MAX_ROWS = 500


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _listed(schedule: Schedule) -> str:
    return reverse("dashboard:schedules") + f"#schedule-{schedule.pk}"


@login_required
@require_GET
@permission_required("recovery.view_schedule", raise_exception=True)
def schedule_list(request: HttpRequest) -> HttpResponse:
    listed = Schedule.objects.select_related("dataset", "last_run").order_by(
        "dataset__name", "name"
    )
    dataset = request.GET.get("dataset", "")
    if dataset:
        listed = listed.filter(dataset__name=dataset)
    rows = schedules.overview(listed[:MAX_ROWS], timezone.now())
    return render(request, "dashboard/schedules.html", {"rows": rows, "dataset": dataset})


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.add_schedule", raise_exception=True)
def schedule_add(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        form = ScheduleForm(initial={"dataset": request.GET.get("dataset", "")})
        return render(request, "dashboard/schedule_form.html", {"form": form})
    form = ScheduleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            schedule = schedules.create(
                data["dataset"],
                data["name"],
                form.settings,
                paused=data["paused"],
                actor=_actor(request),
            )
        except schedules.ScheduleError as exc:  # a name taken meanwhile, a dataset gone
            form.refuse(exc)
        else:
            messages.success(request, f"Schedule {schedule} added.")
            return redirect(_listed(schedule))
    return render(request, "dashboard/schedule_form.html", {"form": form}, status=400)


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.change_schedule", raise_exception=True)
def schedule_edit(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule.objects.select_related("dataset"), pk=schedule_id)
    context = {"schedule": schedule}
    if request.method != "POST":
        context["form"] = ScheduleForm(schedule=schedule)
        return render(request, "dashboard/schedule_form.html", context)
    form = context["form"] = ScheduleForm(request.POST, schedule=schedule)
    if form.is_valid():
        try:
            changed = schedules.change(
                schedule.dataset.name,
                schedule.name,
                form.settings,
                paused=form.cleaned_data["paused"],
                actor=_actor(request),
            )
        except schedules.ScheduleError as exc:  # removed meanwhile
            form.refuse(exc)
        else:
            what = ", ".join(changed)
            messages.success(
                request, f"Schedule {schedule} changed: {what}." if changed else "No change."
            )
            return redirect(_listed(schedule))
    return render(request, "dashboard/schedule_form.html", context, status=400)


@login_required
@require_POST
@permission_required("recovery.change_schedule", raise_exception=True)
def schedule_toggle(request: HttpRequest, schedule_id: int) -> HttpResponse:
    schedule = get_object_or_404(Schedule.objects.select_related("dataset"), pk=schedule_id)
    pause = not schedule.paused
    ok, changed = engine.call(
        request,
        schedules.set_paused,
        schedule.dataset.name,
        schedule.name,
        pause,
        actor=_actor(request),
        reason=request.POST.get("reason", "")[:500],
    )
    if ok:
        state = "paused" if pause else "resumed"
        messages.success(request, f"Schedule {schedule} {state}." if changed else "No change.")
    return redirect(_listed(schedule))


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.delete_schedule", raise_exception=True)
def schedule_remove(request: HttpRequest, schedule_id: int) -> HttpResponse:
    """GET (or an unconfirmed POST) shows what removing does; the confirmed POST removes."""
    schedule = get_object_or_404(
        Schedule.objects.select_related("dataset", "last_run"), pk=schedule_id
    )
    form = ReasonForm(request.POST if request.method == "POST" else None)
    confirmed = request.method == "POST" and request.POST.get("confirmed") == "1"
    if not confirmed or not form.is_valid():
        row = schedules.overview([schedule], timezone.now())[0]
        context = {
            "title": f"Remove schedule {schedule}?",
            "subject": schedule,
            "consequence": confirmations.remove_schedule(schedule, row["next_window"]),
            "button": f"Yes, remove schedule {schedule}",
            "back": _listed(schedule),
            "form": form,
        }
        return render(request, "dashboard/confirm.html", context)
    ok, _ = engine.call(
        request,
        schedules.remove,
        schedule.dataset.name,
        schedule.name,
        actor=_actor(request),
        reason=form.cleaned_data["reason"],
    )
    if ok:
        messages.success(request, f"Schedule {schedule} removed; its runs stay.")
    return redirect("dashboard:schedules")
