"""Runs and tasks: the runs list, a run's page and its task list, accept / reject / publish, and a
task's page with its attempts' screenshots. No view counts a run's tasks (dashboard.runstats and
recovery.quality.figures read the counters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard import bulk, charts, confirm, engine, lists, runstats
from dashboard.delivery_views import may_download
from dashboard.forms import NoteForm, ReasonForm
from recovery import counters
from recovery.delivery import exports
from recovery.fetch import artefacts, robots_state
from recovery.models import (
    Attempt,
    Dataset,
    Observation,
    RecoveryBatch,
    RemoteJob,
    Run,
    RunPartition,
    Task,
    TriageNote,
)
from recovery.quality import acceptance, confirmations, figures, shortfall
from recovery.states import row_states
from recovery.states.choices import TaskState
from recovery.states.run import AVAILABLE

GRID_PAGE = 100
ROBOTS_SHOWN = 20  # origins in the run page's robots.txt table (those in trouble first)


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


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
            request, lists.TASKS, lists.task_rows(run), f"run{run.pk}-tasks", run=run
        )
    listing = lists.bind(request, lists.TASKS, lists.task_rows(run), run=run)
    if listing.redirect:
        return redirect(listing.redirect)
    return render(
        request,
        "dashboard/run_tasks.html",
        {
            "run": run,
            "listing": listing,
            "states": TaskState.choices,
            "bulk_actions": bulk.TASK_ACTIONS,
        },
        status=listing.status,
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
    robots_rows, robots_total = robots_state.for_run(run.pk, limit=ROBOTS_SHOWN)
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
        "shortfall": shortfall.shortfall(run.pk),
        "robots_rows": robots_rows,
        "robots_total": robots_total,
        "remote_jobs": RemoteJob.objects.filter(run=run).order_by("-pk")[:20],
        "batches": _with_outcomes(RecoveryBatch.objects.filter(run=run).order_by("-pk")[:20]),
        "notes": TriageNote.objects.filter(run=run).order_by("-pk")[:10],
        "chart": charts.activity_chart(runstats.chart_buckets(run.pk, minutes)),
        "chart_range": chart_range,
        "chart_ranges": list(runstats.CHART_RANGES),
        "download_formats": (
            exports.FORMATS
            if run.acceptance_state in AVAILABLE and may_download(request.user, run)
            else ()
        ),
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


# --- accept, reject, publish -----------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.accept_run", raise_exception=True)
def run_accept(request: HttpRequest, run_id: int) -> HttpResponse:
    """GET (or an unconfirmed POST) shows what accepting does; the confirmed POST accepts."""
    return _confirmed_move(
        request, run_id, "accept", "accepted", confirmations.accept, acceptance.accept_run
    )


def _confirmed_move(
    request: HttpRequest,
    run_id: int,
    verb: str,
    done: str,
    consequence: Callable[[Run], Any],
    move: Callable[..., Any],
) -> HttpResponse:
    """A run move with nothing to ask but "are you sure": the confirmation page naming its
    consequence, then one engine call."""
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    if not confirm.confirmed(request):
        return confirm.page(
            request,
            title=f"{verb.capitalize()} run #{run.pk}?",
            subject=run,
            consequence=consequence(run),
            button=f"Yes, {verb} run #{run.pk}",
            back=reverse("dashboard:run", args=[run.pk]),
        )
    ok, _ = engine.call(request, move, run.pk, actor=_actor(request))
    if ok:
        messages.success(request, f"Run {run} {done}.")
    return redirect("dashboard:run", run_id=run.pk)


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("recovery.accept_run", raise_exception=True)
def run_reject(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    form = ReasonForm(request.POST if request.method == "POST" else None)
    if not confirm.confirmed(request) or not form.is_valid():
        return confirm.page(
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
    return _confirmed_move(
        request, run_id, "publish", "published", confirmations.publish, acceptance.publish_run
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
    render as a document (recovery.fetch.artefacts checks the name and the PNG signature)."""
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
