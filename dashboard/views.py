"""Dashboard views: thin. Decorators first, then fetch, one engine call, a message, a redirect.

Every page needs a log-in and a permission checked here on the server; templates hide the
buttons a user may not use, but the POST views refuse them regardless. Lists are keyset-paged
(`?after=`) with GET filters, and no view counts a run's tasks (see dashboard.runstats).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

import recovery.exports
import recovery.reconcile
from dashboard import (
    charts,
    engine,
    errorclasses,
    keyset,
    leaseboard,
    lists,
    login_throttle,
    runstats,
)
from dashboard.forms import (
    AttachJobForm,
    NoteForm,
    ReasonForm,
    RecoveryBatchForm,
    ReviewedForm,
)
from recovery import (
    acceptance,
    artefacts,
    confirmations,
    counters,
    figures,
    liveness,
    outbox,
    reruns,
    row_states,
    triage,
)
from recovery.models import (
    Attempt,
    AuditEntry,
    Dataset,
    Observation,
    OutboxEvent,
    RecoveryBatch,
    RemoteJob,
    Run,
    RunPartition,
    Task,
    TriageNote,
    ValidationResult,
    WorkerHeartbeat,
)
from recovery.states.delivery import DeliveryState
from recovery.states.remote_job import POLLABLE, RECONCILE
from recovery.states.run import AVAILABLE
from recovery.states.task import TaskState

GRID_PAGE = 100


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _form_errors(request: HttpRequest, form) -> None:
    for field, errors in form.errors.items():
        label = "" if field == "__all__" else f"{field}: "
        for error in errors:
            messages.error(request, f"{label}{error}")


# --- log-in ----------------------------------------------------------------------------------


class ThrottledLoginView(auth_views.LoginView):
    """Django's login view, refusing a (username, address) pair after repeated failures."""

    def post(self, request, *args, **kwargs):
        username = request.POST.get("username", "")
        if login_throttle.is_locked(request, username):
            # Refused before any password check: an unbound form, no authenticate() call.
            form = self.get_form_class()(request, initial={"username": username})
            context = self.get_context_data(form=form, throttled=login_throttle.MESSAGE)
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        login_throttle.record_failure(self.request, self.request.POST.get("username", ""))
        return super().form_invalid(form)

    def form_valid(self, form):
        login_throttle.clear(self.request, self.request.POST.get("username", ""))
        return super().form_valid(form)


# --- runs ------------------------------------------------------------------------------------


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to its first page: operators and admins to runs, exporters to exports;
    in the demo, everyone to the demo's checklist."""
    if settings.SALVAGE_DEMO:
        return redirect("dashboard:demo")
    if request.user.has_perm("recovery.view_run"):
        return redirect("dashboard:runs")
    if request.user.has_perm("recovery.export_dataset"):
        return redirect("dashboard:exports")
    raise PermissionDenied


@login_required
@require_GET
@permission_required("recovery.view_run", raise_exception=True)
def runs(request: HttpRequest, export: bool = False) -> HttpResponse:
    qs = Run.objects.select_related("dataset")
    if export:
        return lists.export_csv(request, lists.RUNS, qs, "runs")
    listing = lists.bind(request, lists.RUNS, qs)
    if listing.redirect:
        return redirect(listing.redirect)
    stats = figures.run_figures(listing.rows)
    rows = [
        {"run": run, "f": stats[run.pk], "bar": charts.progress_bar(stats[run.pk].counts, 0)}
        for run in listing.rows
    ]
    datasets = Dataset.objects.order_by("name").values_list("name", flat=True)[:200]
    return render(
        request,
        "dashboard/runs.html",
        {"listing": listing, "rows": rows, "datasets": datasets},
        status=listing.status,
    )


@login_required
@require_GET
@permission_required(("recovery.view_run", "recovery.view_task"), raise_exception=True)
def run_tasks(request: HttpRequest, run_id: int, export: bool = False) -> HttpResponse:
    """A run's tasks: filter by state, partition, page type, error class; search by URL or key."""
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    if export:
        return lists.export_csv(
            request, lists.TASKS, _task_rows(run), f"run{run.pk}-tasks", run=run
        )
    listing = lists.bind(request, lists.TASKS, _task_rows(run), run=run)
    if listing.redirect:
        return redirect(listing.redirect)
    return render(
        request,
        "dashboard/run_tasks.html",
        {"run": run, "listing": listing, "states": TaskState.choices},
        status=listing.status,
    )


def _task_rows(run: Run):
    return Task.objects.filter(run=run).only(
        "pk",
        "run_id",
        "url",
        "state",
        "partition",
        "page_type",
        "attempt_count",
        "last_error_class",
        "last_http_status",
        "state_changed_at",
    )


@login_required
@require_GET
@permission_required("recovery.view_run", raise_exception=True)
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    summary = figures.run_figures([run])[run.pk]
    grid = counters.by_partition(run.pk)
    flags = {p.name: p for p in RunPartition.objects.filter(run=run)[:5000]}
    # Quarantined partitions first, then by name; paged by position in that order.
    names = sorted(set(grid) | set(flags), key=lambda n: (not _flagged(flags.get(n)), n))
    start = _int(request.GET.get("grid_from"), 0)
    shown = names[start : start + GRID_PAGE]
    states = [s for s in charts.STATE_COLOURS if any(s in grid.get(n, {}) for n in names)]
    grid_rows = [
        {
            "name": name,
            "flag": flags.get(name),
            "cells": [(s, grid.get(name, {}).get(s, 0)) for s in states],
            "total": sum(grid.get(name, {}).values()),
        }
        for name in shown
    ]
    chart_range = request.GET.get("range", "1h")
    minutes = runstats.CHART_RANGES.get(chart_range, 60)
    context = {
        "run": run,
        "f": summary,
        "bar": charts.progress_bar(summary.counts, summary.total, width=600),
        "states": states,
        "grid_rows": grid_rows,
        "grid_next": start + GRID_PAGE if start + GRID_PAGE < len(names) else None,
        "grid_prev": max(start - GRID_PAGE, 0) if start else None,
        "validation": figures.rule_checks(run, limit=200),
        "inventory_drift": figures.inventory_drift(run.pk),
        "drift_cap": figures.DRIFT_CAP,
        "sitemap": figures.sitemap_progress(run.pk),
        "remote_jobs": RemoteJob.objects.filter(run=run).order_by("-pk")[:20],
        "batches": _with_outcomes(RecoveryBatch.objects.filter(run=run).order_by("-pk")[:20]),
        "notes": TriageNote.objects.filter(run=run).order_by("-pk")[:10],
        "chart": charts.activity_chart(runstats.chart_buckets(run.pk, minutes)),
        "chart_range": chart_range,
        "chart_ranges": list(runstats.CHART_RANGES),
    }
    return render(request, "dashboard/run_detail.html", context)


def _with_outcomes(batches) -> list[RecoveryBatch]:
    """Each batch with its badge figures (a running one counts its tasks: one indexed query)."""
    batches = list(batches)
    for batch in batches:
        batch.figures = figures.batch_outcome(batch)
    return batches


def _flagged(flag: RunPartition | None) -> bool:
    return bool(flag and flag.quarantined)


def _int(raw: str | None, default: int) -> int:
    try:
        return max(int(raw or default), 0)
    except ValueError:
        return default


def _confirmed(request: HttpRequest) -> bool:
    """True only for the confirmation page's own POST; any other request just shows the page."""
    return request.method == "POST" and request.POST.get("confirmed") == "1"


def _confirm_page(
    request: HttpRequest,
    *,
    title: str,
    subject,
    consequence: confirmations.Consequence,
    button: str,
    back: str,
    form=None,
) -> HttpResponse:
    return render(
        request,
        "dashboard/confirm.html",
        {
            "title": title,
            "subject": subject,
            "consequence": consequence,
            "button": button,
            "back": back,
            "form": form,
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.accept_run", raise_exception=True)
def run_accept(request: HttpRequest, run_id: int) -> HttpResponse:
    """GET (or an unconfirmed POST) shows what accepting does; the confirmed POST accepts."""
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    if not _confirmed(request):
        return _confirm_page(
            request,
            title=f"Accept run #{run.pk}?",
            subject=run,
            consequence=confirmations.accept(run),
            button=f"Yes, accept run #{run.pk}",
            back=reverse("dashboard:run", args=[run.pk]),
        )
    ok, _ = engine.call(request, acceptance.accept_run, run.pk, actor=_actor(request))
    if ok:
        messages.success(request, f"Run {run} accepted.")
    return redirect("dashboard:run", run_id=run.pk)


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.accept_run", raise_exception=True)
def run_reject(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    form = ReasonForm(request.POST if request.method == "POST" else None)
    if not _confirmed(request) or not form.is_valid():
        return _confirm_page(
            request,
            title=f"Reject run #{run.pk}?",
            subject=run,
            consequence=confirmations.reject(run),
            button=f"Yes, reject run #{run.pk}",
            back=reverse("dashboard:run", args=[run.pk]),
            form=form,
        )
    ok, _ = engine.call(
        request,
        acceptance.reject_run,
        run.pk,
        actor=_actor(request),
        reason=form.cleaned_data["reason"],
    )
    if ok:
        messages.success(request, f"Run {run} rejected.")
    return redirect("dashboard:run", run_id=run.pk)


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.accept_run", raise_exception=True)
def run_publish(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    if not _confirmed(request):
        return _confirm_page(
            request,
            title=f"Publish run #{run.pk}?",
            subject=run,
            consequence=confirmations.publish(run),
            button=f"Yes, publish run #{run.pk}",
            back=reverse("dashboard:run", args=[run.pk]),
        )
    ok, _ = engine.call(request, acceptance.publish_run, run.pk, actor=_actor(request))
    if ok:
        messages.success(request, f"Run {run} published.")
    return redirect("dashboard:run", run_id=run.pk)


@login_required
@require_GET
@permission_required("recovery.view_run", raise_exception=True)
def glossary(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/glossary.html", {"terms": figures.GLOSSARY.items()})


# --- quarantine and triage -------------------------------------------------------------------


@login_required
@require_GET
@permission_required(("recovery.view_run", "recovery.view_task"), raise_exception=True)
def quarantine(request: HttpRequest, run_id: int, export: bool = False) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    state = TaskState.DEAD if request.GET.get("state") == "dead" else TaskState.QUARANTINED
    if export:
        rows = _task_rows(run).filter(state=state)
        return lists.export_csv(
            request, lists.QUARANTINE_TASKS, rows, f"run{run.pk}-{state}", run=run
        )

    grid = counters.by_partition(run.pk)
    flags = {p.name: p for p in RunPartition.objects.filter(run=run)[:5000]}
    partitions = [
        {
            "name": name,
            "flag": flags.get(name),
            "quarantined": grid.get(name, {}).get(TaskState.QUARANTINED, 0),
            "dead": grid.get(name, {}).get(TaskState.DEAD, 0),
            "total": sum(grid.get(name, {}).values()),
        }
        for name in sorted(set(grid) | set(flags))
        if _flagged(flags.get(name))
        or grid.get(name, {}).get(TaskState.QUARANTINED)
        or grid.get(name, {}).get(TaskState.DEAD)
    ]
    partitions.sort(key=lambda p: (not _flagged(p["flag"]), -p["quarantined"], p["name"]))
    groups, capped = runstats.error_groups(run.pk, state)

    # The tasks of the chosen state, with the same filters, search and pager as a run's tasks.
    listing = lists.bind(
        request, lists.QUARANTINE_TASKS, _task_rows(run).filter(state=state), run=run
    )
    if listing.redirect:
        return redirect(listing.redirect)
    failed_rules = sorted(
        set(
            ValidationResult.objects.filter(run=run, passed=False).values_list("rule", flat=True)[
                :500
            ]
        )
    )
    batch_form = RecoveryBatchForm(
        partitions=sorted(grid),
        page_types=sorted((run.dataset.spec or {}).get("page_types", {}) or []),
        rules=failed_rules,
        error_classes=[(p.error_class, p.label) for p in errorclasses.present(run.pk)],
        initial={
            "scraper_version": run.scraper_version,
            "partitions": [p["name"] for p in partitions if _flagged(p["flag"])],
        },
    )
    initial = batch_form.initial
    batch_choices = [
        {
            "name": name,
            "label": label,
            "options": [
                (value, label, value in initial.get(name, ()))
                for value, label in batch_form.fields[name].choices
            ],
        }
        for name, label in (
            ("partitions", "Partitions"),
            ("page_types", "Page types"),
            ("error_classes", "Error classes"),
            ("rules", "Failed rules"),
        )
    ]
    context = {
        "run": run,
        "listing": listing,
        "state": state,
        "batch_choices": batch_choices,
        "partitions": partitions,
        "groups": groups,
        "capped": capped,
        "sample_cap": runstats.SAMPLE_CAP,
        "batch_form": batch_form,
        "note_form": NoteForm(),
        "batches": _with_outcomes(RecoveryBatch.objects.filter(run=run).order_by("-pk")[:10]),
        "notes": TriageNote.objects.filter(run=run).order_by("-pk")[:20],
    }
    return render(request, "dashboard/quarantine.html", context, status=listing.status)


@login_required
@require_POST
@permission_required("recovery.triage_run", raise_exception=True)
def add_note(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    form = NoteForm(request.POST)
    if form.is_valid():
        ok, _ = engine.call(
            request,
            triage.add_note,
            run.pk,
            _actor(request),
            form.cleaned_data["text"],
            partition=form.cleaned_data["partition"],
            task_id=form.cleaned_data["task"],
        )
        if ok:
            messages.success(request, "Note added.")
    else:
        _form_errors(request, form)
    if form.is_valid() and form.cleaned_data["task"]:
        return redirect("dashboard:task", task_id=form.cleaned_data["task"])
    return redirect("dashboard:quarantine", run_id=run.pk)


@login_required
@require_POST
@permission_required("recovery.triage_run", raise_exception=True)
def mark_reviewed(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    form = ReviewedForm(request.POST)
    if form.is_valid():
        partition = form.cleaned_data["partition"]
        ok, _ = engine.call(request, triage.mark_reviewed, run.pk, partition, _actor(request))
        if ok:
            messages.success(request, f"Partition {partition} marked reviewed.")
    else:
        _form_errors(request, form)
    return redirect("dashboard:quarantine", run_id=run.pk)


@login_required
@require_POST
@permission_required("recovery.create_recovery_batch", raise_exception=True)
def create_batch(request: HttpRequest, run_id: int) -> HttpResponse:
    """Select -> confirm -> one engine call: the first POST shows what will be rerun."""
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    grid = counters.by_partition(run.pk)
    form = RecoveryBatchForm(
        request.POST,
        partitions=sorted(grid),
        page_types=sorted((run.dataset.spec or {}).get("page_types", {}) or []),
        rules=sorted(
            set(
                ValidationResult.objects.filter(run=run, passed=False).values_list(
                    "rule", flat=True
                )[:500]
            )
        ),
        error_classes=[(c, c) for c in errorclasses.classes(run.pk)],
    )
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("dashboard:quarantine", run_id=run.pk)
    data = form.cleaned_data
    selection = {
        "partitions": tuple(data["partitions"]),
        "page_types": tuple(data["page_types"]),
        "error_classes": tuple(data["error_classes"]),
        "rules": tuple(data["rules"]),
    }
    expected = _int(request.POST.get("expected_tasks"), 0)
    if _confirmed(request) and expected:
        ok, batch = engine.call(
            request,
            reruns.create_recovery_batch,
            run.pk,
            **selection,
            reason=data["reason"],
            scraper_version=data["scraper_version"],
            actor=_actor(request),
            expected_tasks=expected,  # the count the operator confirmed
        )
        if ok:
            messages.success(
                request, f"Recovery batch {batch.pk}: {batch.task_count} tasks queued."
            )
            return redirect("dashboard:batch", batch_id=batch.pk)
        # Refused (the count moved, or the selection no longer matches): show it again as it
        # is now, or go back to the form if it matches nothing.
    # Nothing changes yet: the count is the batch's own selection query (reruns.selected_tasks).
    ok, preview = engine.call(request, reruns.preview_recovery_batch, run.pk, **selection)
    if not ok:
        return redirect("dashboard:quarantine", run_id=run.pk)
    return render(
        request,
        "dashboard/batch_confirm.html",
        {"run": run, "form": form, "data": data, "preview": preview},
    )


@login_required
@require_GET
@permission_required("recovery.view_recoverybatch", raise_exception=True)
def batch_detail(request: HttpRequest, batch_id: int) -> HttpResponse:
    batch = get_object_or_404(RecoveryBatch.objects.select_related("run__dataset"), pk=batch_id)
    outcome = figures.batch_outcome(batch)
    context = {
        "batch": batch,
        "outcome": outcome,
        "bar": charts.progress_bar(outcome.counts, outcome.total, width=600),
    }
    return render(request, "dashboard/batch_detail.html", context)


# --- reconcile -------------------------------------------------------------------------------


@login_required
@require_GET
@permission_required("recovery.view_remotejob", raise_exception=True)
def reconcile(request: HttpRequest, export: bool = False) -> HttpResponse:
    qs = RemoteJob.objects.select_related("attempt__task", "run__dataset", "replaces")
    if export:
        return lists.export_csv(request, lists.RECONCILE_LIST, qs, "reconcile")
    listing = lists.bind(request, lists.RECONCILE_LIST, qs)
    return render(
        request,
        "dashboard/reconcile.html",
        {
            "listing": listing,
            "open_states": RECONCILE,
            "attach_form": AttachJobForm(),
            "reason_form": ReasonForm(),
        },
        status=listing.status,
    )


@login_required
@require_POST
@permission_required("recovery.resolve_reconcile", raise_exception=True)
def reconcile_attach(request: HttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(RemoteJob, pk=job_id)
    form = AttachJobForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return redirect("dashboard:reconcile")
    ok, _ = engine.call(
        request,
        recovery.reconcile.attach_job_id,
        job.pk,
        form.cleaned_data["provider_job_id"],
        actor=_actor(request),
        reason=form.cleaned_data["reason"],
    )
    if ok:
        messages.success(request, f"Remote job {job.pk}: job id attached.")
    return redirect("dashboard:reconcile")


def _reconcile_decision(
    request: HttpRequest, job_id: int, *, action, consequence, title: str, done: str
) -> HttpResponse:
    """Replace and dismiss: a confirmation page first (with the reason), then one engine call."""
    job = get_object_or_404(RemoteJob.objects.select_related("run__dataset"), pk=job_id)
    form = ReasonForm(request.POST if request.method == "POST" else None)
    if not _confirmed(request) or not form.is_valid():
        return _confirm_page(
            request,
            title=title.format(job=job),
            subject=job,
            consequence=consequence(job),
            button=f"Yes, {title.split(' remote')[0].lower()} remote job #{job.pk}",
            back=reverse("dashboard:reconcile") + f"#job-{job.pk}",
            form=form,
        )
    ok, _ = engine.call(
        request, action, job.pk, actor=_actor(request), reason=form.cleaned_data["reason"]
    )
    if ok:
        messages.success(request, f"Remote job {job.pk}: {done}.")
    return redirect("dashboard:reconcile")


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.resolve_reconcile", raise_exception=True)
def reconcile_replace(request: HttpRequest, job_id: int) -> HttpResponse:
    return _reconcile_decision(
        request,
        job_id,
        action=recovery.reconcile.replace_attempt,
        consequence=confirmations.replace,
        title="Replace remote job #{job.pk} with a new paid job?",
        done="replacement attempt created",
    )


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.resolve_reconcile", raise_exception=True)
def reconcile_dismiss(request: HttpRequest, job_id: int) -> HttpResponse:
    return _reconcile_decision(
        request,
        job_id,
        action=recovery.reconcile.dismiss,
        consequence=confirmations.dismiss,
        title="Dismiss remote job #{job.pk}?",
        done="dismissed",
    )


# --- tasks -----------------------------------------------------------------------------------


@login_required
@require_GET
@permission_required(("recovery.view_task", "recovery.view_attempt"), raise_exception=True)
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    task = get_object_or_404(Task.objects.select_related("run__dataset", "parent"), pk=task_id)
    attempts = list(
        Attempt.objects.filter(task=task)
        .select_related("remote_job", "recovery_batch")
        .order_by("started_at")[:200]
    )
    held = set(row_states.held_partitions(task.run_id).values_list("name", flat=True))
    context = {
        "task": task,
        "attempts": attempts,
        "observations": [
            (o, row_states.shown_state(o, held))
            for o in Observation.objects.filter(source_task=task).order_by("-pk")[:20]
        ],
        "notes": TriageNote.objects.filter(task=task).order_by("-pk")[:20],
        "note_form": NoteForm(initial={"task": task.pk, "partition": task.partition}),
    }
    return render(request, "dashboard/task_detail.html", context)


@login_required
@require_GET
@permission_required(("recovery.view_task", "recovery.view_attempt"), raise_exception=True)
def attempt_screenshot(request: HttpRequest, task_id: int, attempt_id) -> HttpResponse:
    """A failed rendered page's screenshot: PNG bytes only, never anything a browser would
    render as a document (recovery.artefacts checks the name and the PNG signature)."""
    attempt = get_object_or_404(Attempt.objects.only("artefact"), pk=attempt_id, task_id=task_id)
    try:
        png = artefacts.read_screenshot((attempt.artefact or {}).get("screenshot"))
    except artefacts.ArtefactMissing as exc:
        raise Http404(str(exc)) from None
    response = HttpResponse(png, content_type="image/png")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = f'inline; filename="attempt-{attempt_id}.png"'
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=3600"
    return response


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


# --- workers and leases ----------------------------------------------------------------------


@login_required
@require_GET
@permission_required(("recovery.view_workerheartbeat", "recovery.view_task"), raise_exception=True)
def workers(request: HttpRequest, export: bool = False) -> HttpResponse:
    if export:
        return lists.export_csv(request, lists.WORKERS, WorkerHeartbeat.objects.all(), "workers")
    now = timezone.now()
    listing = lists.bind(request, lists.WORKERS, WorkerHeartbeat.objects.all())
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
        current = recovery.exports.current_run(dataset.name)
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


EXPORT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}


@login_required
@require_GET
@permission_required("recovery.export_dataset", raise_exception=True)
def export_download(request: HttpRequest, run_id: int, fmt: str) -> HttpResponse:
    if fmt not in EXPORT_TYPES:
        raise Http404("unknown export format")
    # Only accepted or published runs are exportable (guarantee 6: quarantine never leaves).
    run = get_object_or_404(
        Run.objects.select_related("dataset"), pk=run_id, acceptance_state__in=AVAILABLE
    )
    ok, chunks = engine.call(request, recovery.exports.download, run.pk, fmt, _actor(request))
    if not ok:
        return redirect("dashboard:exports")
    response = StreamingHttpResponse(chunks, content_type=EXPORT_TYPES[fmt])
    filename = f"{run.dataset.name}-{run.window}-run{run.pk}.{fmt}"
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


# --- audit -----------------------------------------------------------------------------------


@login_required
@require_GET
@permission_required("recovery.view_audit", raise_exception=True)
def audit(request: HttpRequest, export: bool = False) -> HttpResponse:
    if export:
        return lists.export_csv(request, lists.AUDIT, AuditEntry.objects.all(), "audit")
    listing = lists.bind(request, lists.AUDIT, AuditEntry.objects.all())
    return render(request, "dashboard/audit.html", {"listing": listing}, status=listing.status)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    # Resolved per request: the static manifest exists only after collectstatic.
    return redirect(static("favicon.svg"), permanent=True)


# --- errors ----------------------------------------------------------------------------------


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400 with the navigation and, for a list's refusal, what it could not use.

    Django's own 400 view renders without the request (no navigation) and hides the reason;
    the reasons our lists raise name only the parameter, never data.
    """
    reason = str(exception) if isinstance(exception, keyset.BadCursor | lists.BadList) else ""
    return render(request, "400.html", {"reason": reason}, status=400)
