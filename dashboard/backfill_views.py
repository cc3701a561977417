"""A schedule's backfill in the browser (admins): `manage.py schedule backfill` behind a
confirmation that names every window of the range, with the run each already has (adopted) or
"made". The range is read and checked by recovery.intake.backfill.plan, the confirmed POST is
one call of recovery.intake.backfill.backfill, which audits it (`schedule_backfilled`)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from dashboard import engine
from dashboard.schedule_forms import BackfillForm
from recovery.intake import backfill
from recovery.intake.recurrence import ScheduleError
from recovery.models import Schedule

TEMPLATE = "dashboard/schedule_backfill.html"


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.change_schedule", raise_exception=True)
def schedule_backfill(request: HttpRequest, schedule_id: int) -> HttpResponse:
    """GET: the range form; POST: the confirmation naming the windows; a POST with
    confirmed=1 and the confirmed windows: the backfill, a message, back to the list."""
    schedule = get_object_or_404(Schedule.objects.select_related("dataset"), pk=schedule_id)
    back = reverse("dashboard:schedules") + f"#schedule-{schedule.pk}"
    form = BackfillForm(request.POST if request.method == "POST" else None)
    context = {"schedule": schedule, "form": form, "back": back}
    if request.method != "POST":
        return render(request, TEMPLATE, context)
    if not form.is_valid():
        return render(request, TEMPLATE, context, status=400)
    data = form.cleaned_data
    args = (schedule.dataset.name, schedule.name, data["start"], data["stop"])
    if request.POST.get("confirmed") != "1":
        try:
            context["plan"] = backfill.plan(*args)
        except ScheduleError as exc:
            form.refuse(exc)
            return render(request, TEMPLATE, context, status=400)
        return render(request, TEMPLATE, context)
    ok, result = engine.call(
        request,
        backfill.backfill,
        *args,
        actor=request.user.get_username(),
        reason=data["reason"],
        expected=request.POST.getlist("window"),
    )
    if ok:
        (messages.error if result.failed else messages.success)(request, result.line() + ".")
    return redirect(back)
