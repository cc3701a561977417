"""Schedules in the browser: every dataset's recurring collections, their last and next windows
and last error (operators); admins add, edit, pause/resume and remove them. Each change is one
call of the command line's engine function (recovery.intake.schedules: create, change, set_paused,
remove), checked by the command's rules and written to the audit log there; pausing or resuming
the selected schedules is one call of recovery.intake.pausing, which makes the same calls."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard import bulk, engine, lists
from dashboard.forms import OptionalReasonForm, ReasonForm
from dashboard.schedule_forms import ScheduleForm
from recovery import attention
from recovery.intake import pausing, schedules
from recovery.models import Schedule
from recovery.quality import confirmations


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _listed(schedule: Schedule) -> str:
    # The list pages: filtered to the schedule's dataset, the row is on the first page (as the
    # dataset page links it) rather than on whichever page the whole list puts it.
    query = urlencode({"dataset": schedule.dataset.name})
    return reverse("dashboard:schedules") + f"?{query}#schedule-{schedule.pk}"


@login_required
@require_GET
@permission_required("recovery.view_schedule", raise_exception=True)
def schedule_list(
    request: HttpRequest, export: bool = False
) -> HttpResponse | StreamingHttpResponse:
    """The schedules (dashboard.lists.SCHEDULES: filters, search, sorts, keyset pages, CSV); the
    windows and the overdue check are worked out for the rows of this page only."""
    qs = Schedule.objects.select_related("dataset", "last_run")
    if export:
        return lists.export_csv(request, lists.SCHEDULES, qs, "schedules")
    listing = lists.bind(request, lists.SCHEDULES, qs)
    context = {
        "listing": listing,
        "rows": schedules.overview(listing.rows, timezone.now()),
        "dataset": listing.params.get("dataset", ""),
        "overdue": listing.params.get("needs") == attention.OVERDUE_SCHEDULES,
        "bulk_actions": bulk.SCHEDULE_ACTIONS,
    }
    return render(request, "dashboard/schedules.html", context, status=listing.status)


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


@login_required
@require_POST
@permission_required("recovery.change_schedule", raise_exception=True)
def schedules_bulk(request: HttpRequest) -> HttpResponse:
    """Pause or resume the selected schedules after a confirmation with the count: each as its
    own Pause/Resume button would (one audit entry each), all or none."""
    chosen = bulk.read(request)
    back = bulk.back(reverse("dashboard:schedules"), chosen)
    if chosen.action not in dict(bulk.SCHEDULE_ACTIONS) or not chosen.ids:
        messages.error(request, "Select schedules and an action first.")
        return redirect(back)
    pause = chosen.action == "pause"
    done = "paused" if pause else "resumed"
    form = OptionalReasonForm(request.POST if chosen.confirmed else None)
    if chosen.confirmed and form.is_valid():
        ok, changed = engine.call(
            request,
            pausing.set_paused_many,
            chosen.ids,
            pause,
            actor=_actor(request),
            reason=form.cleaned_data["reason"],
            expected=chosen.expected,
        )
        if ok:
            messages.success(request, f"{bulk.counted(changed, 'schedule')} {done}.")
            return redirect(back)
    ok, changing = engine.call(request, pausing.to_change, chosen.ids, pause)
    if not ok:
        return redirect(back)
    found = {str(s.pk) for s in changing}
    verb = "Pause" if pause else "Resume"
    shown = bulk.Page(
        title=f"{verb} {bulk.counted(len(changing), 'schedule')}?",
        count=len(changing),
        noun=bulk.noun(len(changing), "schedule"),
        consequence=confirmations.pause_selected(len(changing), pause),
        rows=[bulk.Row(str(s), _listed(s), schedules.describe(s)["recurrence"]) for s in changing],
        skipped=[
            f"schedule #{pk} is {done} already (or was removed)"
            for pk in chosen.ids
            if pk not in found
        ],
        button=f"Yes, {verb.lower()} {bulk.counted(len(changing), 'schedule')}",
        back=back,
        fields=form,
    )
    return bulk.page(request, chosen, shown)
