"""A media job's handoff actions (seed 003's "expired URL versus missing file" guide): refresh
its link (a lookup, never a new job; a working link is shown once) and, only for a file the
provider answers 404/410 for, regenerate it behind a confirmation that says it is a new paid
job."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

import recovery.remote
from dashboard import confirm, engine
from dashboard.forms import ReasonForm
from recovery.models import RemoteJob
from recovery.quality import confirmations


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _job_page(job_id: int) -> str:
    return reverse("dashboard:reconcile") + f"?job={job_id}#job-{job_id}"


@login_required
@require_POST
@permission_required("recovery.resolve_reconcile", raise_exception=True)
def media_refresh(request: HttpRequest, job_id: int) -> HttpResponse:
    """Look the job up for a fresh link and check it: a working link is shown once (never
    stored); a missing file is recorded and offered for regeneration."""
    job = get_object_or_404(RemoteJob, pk=job_id)
    ok, refreshed = engine.call(request, recovery.remote.refresh_media, job.pk, _actor(request))
    if not ok:
        return redirect(_job_page(job.pk))
    if refreshed.outcome == "missing":
        messages.warning(
            request,
            f"Remote job {job.pk}: {refreshed.detail}. Regenerating it creates a new paid job.",
        )
        return redirect(_job_page(job.pk))
    # The fresh link is a temporary credential of its own: it goes in this answer only.
    response = render(request, "dashboard/media_link.html", {"job": job, "refreshed": refreshed})
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.create_recovery_batch", raise_exception=True)
def media_regenerate(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(RemoteJob.objects.select_related("run__dataset"), pk=job_id)
    form = ReasonForm(request.POST if request.method == "POST" else None)
    if not confirm.confirmed(request) or not form.is_valid():
        return confirm.page(
            request,
            title=f"Regenerate the media of remote job #{job.pk} (a new paid job)?",
            subject=job,
            consequence=confirmations.regenerate(job),
            button=f"Yes, create a new paid {job.provider} job",
            back=_job_page(job.pk),
            form=form,
        )
    ok, batch = engine.call(
        request,
        recovery.remote.regenerate_media,
        job.pk,
        _actor(request),
        form.cleaned_data["reason"],
    )
    if ok:
        messages.success(
            request, f"Remote job {job.pk}: regenerating in recovery batch {batch.pk}."
        )
        return redirect("dashboard:batch", batch.pk)
    return redirect(_job_page(job.pk))
