"""What an operator watches: the workers page (processes, live leases, polls) and the audit log."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard import leaseboard, lists
from recovery.models import AuditEntry, RemoteJob
from recovery.ops import liveness
from recovery.states.remote_job import POLLABLE


@login_required
@require_GET
@permission_required(("recovery.view_workerheartbeat", "recovery.view_task"), raise_exception=True)
def workers(request: HttpRequest, export: bool = False) -> HttpResponse:
    if export:
        return lists.export_csv(request, lists.WORKERS, liveness.processes(), "workers")
    now = timezone.now()
    # Processes only: a provider job import's commit row is no worker (liveness.processes).
    listing = lists.bind(request, lists.WORKERS, liveness.processes())
    for row in listing.rows:
        row.status = liveness.status(row.last_seen, row.stopped_at, now)
    polls = RemoteJob.objects.filter(state__in=POLLABLE, lease_until__gt=now).order_by(
        "lease_until"
    )[:50]
    return render(
        request,
        "dashboard/workers.html",
        {
            "listing": listing,
            "counts": liveness.counts(now),
            "legend": liveness.thresholds().legend(),
            "leases": leaseboard.live_leases(now),
            "held": leaseboard.held_by_jobs(),
            "polls": polls,
            "now": now,
        },
        status=listing.status,
    )


@login_required
@require_GET
@permission_required("recovery.view_audit", raise_exception=True)
def audit(request: HttpRequest, export: bool = False) -> HttpResponse:
    if export:
        return lists.export_csv(request, lists.AUDIT, AuditEntry.objects.all(), "audit")
    listing = lists.bind(request, lists.AUDIT, AuditEntry.objects.all())
    return render(request, "dashboard/audit.html", {"listing": listing}, status=listing.status)
