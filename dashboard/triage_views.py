"""Triage: a run's quarantine page, notes and reviewed marks, recovery batches (select, confirm,
one engine call), and the reconcile queue of remote jobs that need an operator's decision; the
bulk actions of the task lists (rerun the selected tasks) and of the reconcile queue (one
decision for the selected jobs), through dashboard.bulk's confirmation.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

import recovery.quality.quarantine
import recovery.remote.reconcile
from dashboard import bulk, charts, confirm, engine, lists
from dashboard.forms import (
    AttachJobForm,
    NoteForm,
    ReasonForm,
    RecoveryBatchForm,
    RerunForm,
    ReviewedForm,
)
from recovery import counters
from recovery.archive import pages as archive_pages
from recovery.models import RecoveryBatch, RemoteJob, Run
from recovery.quality import confirmations, errorclasses, figures, reruns, triage
from recovery.states.choices import TaskState
from recovery.states.remote_job import RECONCILE


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


def _form_errors(request: HttpRequest, form) -> None:
    for field, errors in form.errors.items():
        label = "" if field == "__all__" else f"{field}: "
        for error in errors:
            messages.error(request, f"{label}{error}")


# --- quarantine and triage -------------------------------------------------------------------


@login_required
@require_GET
@permission_required(("recovery.view_run", "recovery.view_task"), raise_exception=True)
def quarantine(request: HttpRequest, run_id: int, export: bool = False) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    state = TaskState.DEAD if request.GET.get("state") == "dead" else TaskState.QUARANTINED
    rows = lists.task_rows(run).filter(state=state)
    if export:
        return lists.export_csv(
            request, lists.QUARANTINE_TASKS, rows, f"run{run.pk}-{state}", run=run
        )
    # The tasks of the chosen state, with the same filters, search and pager as a run's tasks.
    listing = lists.bind(request, lists.QUARANTINE_TASKS, rows, run=run)
    if listing.redirect:
        return redirect(listing.redirect)
    page = recovery.quality.quarantine.page(run, state)
    options = page.batch_options
    batch_form = RecoveryBatchForm(
        partitions=options.partitions,
        page_types=options.page_types,
        rules=options.rules,
        error_classes=[(p.error_class, p.label) for p in options.error_classes],
        flagged=options.flagged,
        # Nothing ticked: a flagged partition ticked in advance silently narrowed an error
        # class ticked on its own (the kinds combine with AND); the form marks them instead.
        initial={"scraper_version": reruns.default_scraper_version(run)},
    )
    context = {
        "run": run,
        "listing": listing,
        "bulk_actions": bulk.TASK_ACTIONS,
        "state": page.state,
        "batch_choices": _checkboxes(batch_form),
        "partitions": page.partitions,
        "groups": page.groups,
        "capped": page.capped,
        "sample_cap": page.sample_cap,
        "batch_form": batch_form,
        "note_form": NoteForm(),
        "batches": page.batches,
        "notes": page.notes,
    }
    return render(request, "dashboard/quarantine.html", context, status=listing.status)


def _checkboxes(form: RecoveryBatchForm) -> list[dict]:
    # (value, label, checked) per field, for the plain checkboxes quarantine.html draws.
    return [
        {
            "name": name,
            "label": label,
            "options": [
                (value, option, value in form.initial.get(name, ()))
                for value, option in form.fields[name].choices
            ],
        }
        for name, label in (
            ("partitions", "Partitions"),
            ("page_types", "Page types"),
            ("error_classes", "Error classes"),
            ("rules", "Failed rules"),
        )
    ]


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
    form = RecoveryBatchForm(
        request.POST,
        partitions=sorted(counters.by_partition(run.pk)),
        page_types=recovery.quality.quarantine.page_types(run),
        rules=recovery.quality.quarantine.failed_rules(run),
        # The classes alone: a posted choice is checked, not labelled with its count.
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
    expected = _expected_tasks(request)
    if confirm.confirmed(request) and expected:
        ok, batch = engine.call(
            request,
            reruns.create_recovery_batch,
            run.pk,
            **selection,
            reason=data["reason"],
            scraper_version=data["scraper_version"],
            actor=_actor(request),
            expected_tasks=expected,  # the count the operator confirmed
            from_archive=data["from_archive"],
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


def _expected_tasks(request: HttpRequest) -> int:
    # The count the confirmation page showed; 0 (not confirmed yet) when absent or not a number.
    try:
        return max(int(request.POST.get("expected_tasks") or 0), 0)
    except ValueError:
        return 0


# The lists a task selection comes from, by URL name: where the action returns.
TASK_LISTS = {"run_tasks": "dashboard:run_tasks", "quarantine": "dashboard:quarantine"}


@login_required
@require_POST
@permission_required("recovery.create_recovery_batch", raise_exception=True)
def tasks_bulk(request: HttpRequest, run_id: int) -> HttpResponse:
    """Selected rows of a run's task list -> one recovery batch of exactly those tasks (the
    quarantine form's batch, selected by task id), after a confirmation with the count."""
    run = get_object_or_404(Run.objects.select_related("dataset"), pk=run_id)
    chosen = bulk.read(request)
    listed = TASK_LISTS.get(chosen.list_name, "dashboard:run_tasks")
    back = bulk.back(reverse(listed, args=[run.pk]), chosen)
    if chosen.action not in dict(bulk.TASK_ACTIONS) or not chosen.ids:
        messages.error(request, "Select tasks and an action first.")
        return redirect(back)
    form = RerunForm(
        request.POST if chosen.confirmed else None,
        initial={"scraper_version": reruns.default_scraper_version(run)},
    )
    if chosen.confirmed and form.is_valid():
        ok, batch = engine.call(
            request,
            reruns.create_recovery_batch,
            run.pk,
            task_ids=chosen.ids,
            reason=form.cleaned_data["reason"],
            scraper_version=form.cleaned_data["scraper_version"],
            actor=_actor(request),
            expected_tasks=chosen.expected,  # the count the operator confirmed
        )
        if ok:
            queued = bulk.counted(batch.task_count, "task")
            messages.success(request, f"{queued} queued in recovery batch {batch.pk}.")
            return redirect(back)
    ok, preview = engine.call(request, reruns.preview_recovery_batch, run.pk, task_ids=chosen.ids)
    if not ok:
        return redirect(back)
    shown = bulk.Page(
        title=f"Rerun {bulk.counted(preview.tasks, 'selected task')} of run #{run.pk}?",
        count=preview.tasks,
        noun=bulk.noun(preview.tasks, "task"),
        consequence=confirmations.rerun_selected(preview.tasks, preview.by_state, run),
        rows=[_task_row(task) for task in preview.listed],
        skipped=[f"task #{t.pk} is {t.state}: only settled tasks are rerun" for t in preview.left],
        button=f"Yes, rerun {bulk.counted(preview.tasks, 'task')}",
        back=back,
        fields=form,
    )
    return bulk.page(request, chosen, shown)


def _task_row(task) -> bulk.Row:
    detail = f"{task.state} · {task.partition or '(no partition)'}"
    if task.last_error_class:
        detail += f" · {task.last_error_class}"
    href = reverse("dashboard:task", args=[task.pk])
    return bulk.Row(f"task #{task.pk} {task.url}", href, detail)


@login_required
@require_GET
@permission_required("recovery.view_recoverybatch", raise_exception=True)
def batch_detail(request: HttpRequest, batch_id: int) -> HttpResponse:
    batch = get_object_or_404(RecoveryBatch.objects.select_related("run__dataset"), pk=batch_id)
    outcome = figures.batch_outcome(batch)
    context = {
        "batch": batch,
        "outcome": outcome,
        "sources": archive_pages.batch_sources(batch),
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
            "bulk_actions": bulk.RECONCILE_ACTIONS,
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
        recovery.remote.reconcile.attach_job_id,
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
    if not confirm.confirmed(request) or not form.is_valid():
        return confirm.page(
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
        action=recovery.remote.reconcile.replace_attempt,
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
        action=recovery.remote.reconcile.dismiss,
        consequence=confirmations.dismiss,
        title="Dismiss remote job #{job.pk}?",
        done="dismissed",
    )


_DECIDED = {"dismiss": "dismissed", "replace": "replaced by new jobs"}


@login_required
@require_POST
@permission_required("recovery.resolve_reconcile", raise_exception=True)
def reconcile_bulk(request: HttpRequest) -> HttpResponse:
    """One decision, one reason, for the selected remote jobs: all or none, each job audited
    as its single decision is."""
    chosen = bulk.read(request)
    back = bulk.back(reverse("dashboard:reconcile"), chosen)
    if chosen.action not in _DECIDED or not chosen.ids:
        messages.error(request, "Select remote jobs and a decision first.")
        return redirect(back)
    form = ReasonForm(request.POST if chosen.confirmed else None)
    if chosen.confirmed and form.is_valid():
        ok, decided = engine.call(
            request,
            recovery.remote.reconcile.decide_many,
            chosen.action,
            chosen.ids,
            _actor(request),
            form.cleaned_data["reason"],
            expected=chosen.expected,
        )
        if ok:
            jobs = bulk.counted(len(decided), "remote job")
            messages.success(request, f"{jobs} {_DECIDED[chosen.action]}.")
            return redirect(back)
    ok, jobs = engine.call(request, recovery.remote.reconcile.open_jobs, chosen.ids)
    if not ok:
        return redirect(back)
    open_ids = {str(job.pk) for job in jobs}
    verb = "Dismiss" if chosen.action == "dismiss" else "Replace"
    shown = bulk.Page(
        title=f"{verb} {bulk.counted(len(jobs), 'remote job')}?",
        count=len(jobs),
        noun=bulk.noun(len(jobs), "remote job"),
        consequence=confirmations.decide_selected(chosen.action, jobs),
        rows=[
            bulk.Row(
                f"remote job #{job.pk} · {job.provider} {job.kind} · {job.state}",
                reverse("dashboard:reconcile") + f"?job={job.pk}",
                f"run #{job.run_id} {job.run}",
            )
            for job in jobs
        ],
        skipped=[
            f"remote job #{pk} does not await a decision" for pk in chosen.ids if pk not in open_ids
        ],
        button=f"Yes, {verb.lower()} {bulk.counted(len(jobs), 'remote job')}",
        back=back,
        fields=form,
    )
    return bulk.page(request, chosen, shown)
