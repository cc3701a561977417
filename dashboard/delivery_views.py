"""What leaves the system: the outbox's deliveries (retry, look up, retry the selected or every
failing one) and the exports page with its downloads of accepted and published runs.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

import recovery.delivery.exports
from dashboard import bulk, engine, lists
from recovery.delivery import outbox
from recovery.models import Dataset, OutboxEvent, Run
from recovery.quality import confirmations
from recovery.states.choices import DeliveryState
from recovery.states.run import AVAILABLE


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


# --- deliveries ------------------------------------------------------------------------------


@login_required
@require_GET
@permission_required("recovery.view_outboxevent", raise_exception=True)
def deliveries(request: HttpRequest, export: bool = False) -> HttpResponse:
    qs = OutboxEvent.objects.select_related("run__dataset")
    if export:
        return lists.export_csv(request, lists.DELIVERIES, qs, "deliveries")
    listing = lists.bind(request, lists.DELIVERIES, qs)
    return render(
        request,
        "dashboard/deliveries.html",
        {
            "listing": listing,
            # The engine retries unsent, failed and uncertain events (an uncertain one is
            # looked up first); a lookup makes sense wherever the write may have landed.
            "retryable": {DeliveryState.UNSENT, DeliveryState.FAILED, DeliveryState.UNCERTAIN},
            "lookupable": {DeliveryState.FAILED, DeliveryState.UNCERTAIN},
            "bulk_actions": bulk.DELIVERY_ACTIONS,
        },
        status=listing.status,
    )


@login_required
@require_POST
@permission_required("recovery.retry_delivery", raise_exception=True)
def delivery_retry(request: HttpRequest, event_id) -> HttpResponse:
    event = get_object_or_404(OutboxEvent, pk=event_id)
    ok, _ = engine.call(request, outbox.retry_delivery, event.pk, actor=_actor(request))
    if ok:
        messages.success(request, f"Delivery {event.pk} queued for retry.")
    return redirect("dashboard:deliveries")


@login_required
@require_POST
@permission_required("recovery.retry_delivery", raise_exception=True)
def delivery_lookup(request: HttpRequest, event_id) -> HttpResponse:
    event = get_object_or_404(OutboxEvent, pk=event_id)
    ok, found = engine.call(request, outbox.lookup_delivery, event.pk, actor=_actor(request))
    if ok:
        answer = {True: "found", False: "not found", None: "no answer"}.get(found.get("found"))
        state = found.get("state")
        messages.success(request, f"Delivery {event.pk}: {answer} at the destination; now {state}.")
    return redirect("dashboard:deliveries")


@login_required
@require_POST
@permission_required("recovery.retry_delivery", raise_exception=True)
def deliveries_bulk(request: HttpRequest) -> HttpResponse:
    """Retry the selected deliveries, or every failing one, after a confirmation with the count:
    each as its Retry button would (one audit entry each), all or none."""
    chosen = bulk.read(request)
    back = bulk.back(reverse("dashboard:deliveries"), chosen)
    every = chosen.action == "retry_failing"
    if chosen.action not in dict(bulk.DELIVERY_ACTIONS) or not (every or chosen.ids):
        messages.error(request, "Select deliveries and an action first.")
        return redirect(back)
    ids = None if every else chosen.ids
    if chosen.confirmed:
        ok, retried = engine.call(
            request, outbox.retry_many, ids, _actor(request), expected=chosen.expected
        )
        if ok:
            queued = bulk.counted(retried, "delivery", "deliveries")
            messages.success(request, f"{queued} queued for retry.")
            return redirect(back)
    ok, events = engine.call(request, outbox.retryable, ids)
    if not ok:
        return redirect(back)
    too_many = len(events) > outbox.MAX_RETRIES
    events = events[: outbox.MAX_RETRIES]
    found = {str(event.pk) for event in events}
    consequence = confirmations.retry_selected(len(events), every)
    if too_many:
        consequence.refusals.append(
            f"More than {outbox.MAX_RETRIES} deliveries would be retried: filter the list and "
            "retry them in parts."
        )
    shown = bulk.Page(
        title=f"Retry {bulk.counted(len(events), 'delivery', 'deliveries')}?",
        count=len(events),
        noun=bulk.noun(len(events), "delivery", "deliveries"),
        consequence=consequence,
        rows=[
            bulk.Row(
                f"{event.event_type} event {event.pk}",
                reverse("dashboard:deliveries") + f"?q={event.pk}",
                f"{event.state}, {event.attempts} attempts"
                + (f", run #{event.run_id}" if event.run_id else "")
                + (f": {event.last_error[:200]}" if event.last_error else ""),
            )
            for event in events
        ],
        skipped=[
            f"delivery {pk} is delivered, being sent right now, or gone"
            for pk in ([] if every else chosen.ids)
            if pk not in found
        ],
        button=f"Yes, retry {bulk.counted(len(events), 'delivery', 'deliveries')}",
        back=back,
    )
    return bulk.page(request, chosen, shown)


# --- exports ---------------------------------------------------------------------------------


@login_required
@require_GET
@permission_required("recovery.export_dataset", raise_exception=True)
def exports(request: HttpRequest, export: bool = False) -> HttpResponse:
    if export:
        return lists.export_csv(request, lists.DATASETS, Dataset.objects.all(), "datasets")
    listing = lists.bind(request, lists.DATASETS, Dataset.objects.all())
    rows = []
    for dataset in listing.rows:
        current = recovery.delivery.exports.current_run(dataset.name)
        older = Run.objects.filter(dataset=dataset, acceptance_state__in=AVAILABLE)
        if current is not None:
            older = older.exclude(pk=current.pk)
        rows.append(
            {
                "dataset": dataset,
                "current": current,
                "older": list(older.order_by("-accepted_at", "-pk")[:10]),
            }
        )
    return render(
        request,
        "dashboard/exports.html",
        {"listing": listing, "rows": rows},
        status=listing.status,
    )


EXPORT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson",
    "parquet": "application/vnd.apache.parquet",
}


def may_download(user, run: Run) -> bool:
    """Exporters download every accepted run; an admin the runs they accepted themselves (they
    read its figures before accepting it, and may want the rows they vouched for)."""
    if user.has_perm("recovery.export_dataset"):
        return True
    return user.has_perm("recovery.accept_run") and run.accepted_by == user.get_username()


@login_required
@require_GET
def export_download(request: HttpRequest, run_id: int, fmt: str) -> HttpResponse:
    user = request.user
    if not (user.has_perm("recovery.export_dataset") or user.has_perm("recovery.accept_run")):
        raise PermissionDenied
    if fmt not in EXPORT_TYPES:
        raise Http404("unknown export format")
    # Only accepted or published runs are exportable (guarantee 6: quarantine never leaves).
    run = get_object_or_404(
        Run.objects.select_related("dataset"), pk=run_id, acceptance_state__in=AVAILABLE
    )
    if not may_download(user, run):
        raise PermissionDenied
    ok, chunks = engine.call(
        request, recovery.delivery.exports.download, run.pk, fmt, _actor(request)
    )
    if not ok:
        return redirect("dashboard:exports")
    response = StreamingHttpResponse(chunks, content_type=EXPORT_TYPES[fmt])
    filename = f"{run.dataset.name}-{run.window}-run{run.pk}.{fmt}"
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
