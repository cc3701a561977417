"""Datasets in the browser: the list, one dataset's spec, history and runs, and the admins'
uploads (a spec, as `loaddataset`; a manifest that becomes a run, as `createrun`).

An upload runs the command's own engine functions (recovery.intake.specs.check_bytes and
save_dataset, recovery.intake.manifests.create_run), so the checks and the messages are the
command line's and nothing is written unless everything passed. A refused upload re-renders
the page with each message beside its field (status 400); a manifest's first bad lines are
listed one by one.
A spec upload lists every problem the checks found at once; a spec that would replace an
existing dataset's current one shows the diff against it first and is saved only once the
admin confirms that very version (a version saved meanwhile shows the diff again).

Permission is checked before the body is read (a forged upload by an operator is refused
without parsing it); the CSRF check follows once the size-capped upload handler is in place
(dashboard.uploads).
"""

from __future__ import annotations

import base64

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST

from dashboard import datasetboard, lists, speclines, uploads
from dashboard.forms import ManifestUploadForm, SpecUploadForm
from recovery.intake import manifests, schedules, spec_diff, specs
from recovery.models import Dataset

SPEC_EXCERPT = 2  # lines shown on each side of the line an error points at


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


# --- pages -----------------------------------------------------------------------------------


@login_required
@require_GET
@permission_required("recovery.view_dataset", raise_exception=True)
def datasets(request: HttpRequest, export: bool = False) -> HttpResponse:
    if export:
        return lists.export_csv(request, lists.DATASETS, Dataset.objects.all(), "datasets")
    return _datasets_page(request, SpecUploadForm())


def _datasets_page(
    request: HttpRequest,
    form: SpecUploadForm,
    excerpt=None,
    status: int = 200,
    refusal: str = "",
) -> HttpResponse:
    listing = lists.bind(request, lists.DATASETS, Dataset.objects.all())
    context = {
        "listing": listing,
        "rows": datasetboard.summaries(listing.rows),
        "form": form,
        "excerpt": excerpt,
        "refusal": refusal,
        "spec_cap_mb": settings.SALVAGE_SPEC_UPLOAD_MAX_BYTES / 1_000_000,
    }
    return render(request, "dashboard/datasets.html", context, status=max(status, listing.status))


@login_required
@require_GET
@permission_required("recovery.view_dataset", raise_exception=True)
def dataset_detail(request: HttpRequest, name: str) -> HttpResponse:
    dataset = get_object_or_404(Dataset, name=name)
    return _dataset_page(request, dataset, ManifestUploadForm())


def _dataset_page(
    request: HttpRequest,
    dataset: Dataset,
    form: ManifestUploadForm,
    problems: list[str] = (),
    status: int = 200,
    refusal: str = "",
) -> HttpResponse:
    context = {
        "dataset": dataset,
        "spec_json": datasetboard.spec_json(dataset),
        "history": datasetboard.history(dataset),
        "runs": datasetboard.runs(dataset),
        "runs_shown": datasetboard.RUNS_SHOWN,
        "schedules": schedules.overview(
            dataset.schedules.select_related("last_run").order_by("name"), timezone.now()
        ),
        "current": datasetboard.summaries([dataset])[0].current,
        "task_times": datasetboard.task_times(dataset),
        "form": form,
        "problems": problems,
        "refusal": refusal,
        "manifest_cap_mb": settings.SALVAGE_MANIFEST_UPLOAD_MAX_BYTES / 1_000_000,
    }
    return render(request, "dashboard/dataset_detail.html", context, status=status)


# --- uploads ---------------------------------------------------------------------------------


@csrf_exempt  # checked by csrf_protect below, once the upload handler is in place
@login_required
@require_POST
@permission_required("recovery.upload_dataset", raise_exception=True)
def dataset_upload(request: HttpRequest) -> HttpResponse:
    cap = settings.SALVAGE_SPEC_UPLOAD_MAX_BYTES
    # A confirmation carries the file again as base64 (4/3 of its size); a file part is held
    # to `cap` itself while it streams (uploads.CappedUpload).
    if uploads.declared_too_large(request, staged_cap(cap)):
        return _refused_spec(request, uploads.too_large_message(cap, "spec"), status=413)
    return _dataset_upload(request, uploads.accept(request, cap))


def staged_cap(cap: int) -> int:
    return -(-cap // 3) * 4


@csrf_protect
def _dataset_upload(request: HttpRequest, handler: uploads.CappedUpload) -> HttpResponse:
    form = SpecUploadForm(request.POST, request.FILES)
    if handler.too_large:
        return _refused_spec(request, uploads.too_large_message(handler.cap, "spec"), 413)
    if not form.is_valid():
        return _datasets_page(request, form, status=400)
    if form.cleaned_data.get("staged"):
        data, filename = form.cleaned_data["staged_bytes"], form.cleaned_data["staged_name"]
        if len(data) > handler.cap:
            return _refused_spec(request, uploads.too_large_message(handler.cap, "spec"), 413)
    else:
        upload = form.cleaned_data["spec"]
        data, filename = upload.read(), upload.name
    try:
        spec = specs.check_bytes(data, filename)
        dataset, outcome = specs.save_dataset(
            spec, actor=_actor(request), replaces=form.cleaned_data.get("replaces") or ""
        )
    except specs.SpecError as exc:
        for problem in exc.problems:
            form.add_error("spec", problem)
        return _datasets_page(request, form, _excerpt(data, exc.problems[0]), status=400)
    except specs.Unconfirmed as pending:
        return _spec_diff_page(request, pending.dataset, spec, data, filename, form)
    messages.success(request, f"dataset {dataset.name} {outcome} (spec {dataset.spec_sha256[:12]})")
    return redirect("dashboard:dataset", name=dataset.name)


def _spec_diff_page(request, dataset, spec, data: bytes, filename: str, form) -> HttpResponse:
    """A new version of an existing dataset's spec: the diff first, saved once confirmed."""
    seen = form.cleaned_data.get("replaces") or ""
    context = {
        "dataset": dataset,
        "filename": filename,
        "new_sha256": specs.spec_sha256(spec),
        "diff": spec_diff.lines(dataset.spec, spec, dataset.spec_sha256, specs.spec_sha256(spec)),
        "staged": base64.b64encode(data).decode("ascii"),
        # The diff was drawn again because another version was saved since the last preview.
        "moved": bool(seen) and seen != dataset.spec_sha256,
    }
    return render(request, "dashboard/dataset_spec_diff.html", context)


def _refused_spec(request: HttpRequest, message: str, status: int) -> HttpResponse:
    return _datasets_page(request, SpecUploadForm(), status=status, refusal=message)


def _excerpt(data: bytes, message: str) -> list[tuple[int, str, bool]] | None:
    """The lines around the one the error points at: (number, text, is_the_line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    line = speclines.locate(text, message)
    if line is None:
        return None
    lines = text.split("\n")
    first, last = max(line - SPEC_EXCERPT, 1), min(line + SPEC_EXCERPT, len(lines))
    return [(n, lines[n - 1], n == line) for n in range(first, last + 1)]


@csrf_exempt  # checked by csrf_protect below, once the upload handler is in place
@login_required
@require_POST
@permission_required("recovery.upload_dataset", raise_exception=True)
def run_create(request: HttpRequest, name: str) -> HttpResponse:
    dataset = get_object_or_404(Dataset, name=name)
    cap = settings.SALVAGE_MANIFEST_UPLOAD_MAX_BYTES
    if uploads.declared_too_large(request, cap):
        return _refused_manifest(request, dataset, uploads.too_large_message(cap, "manifest"))
    return _run_create(request, dataset, uploads.accept(request, cap))


@csrf_protect
def _run_create(
    request: HttpRequest, dataset: Dataset, handler: uploads.CappedUpload
) -> HttpResponse:
    form = ManifestUploadForm(request.POST, request.FILES)
    if handler.too_large:
        return _refused_manifest(
            request, dataset, uploads.too_large_message(handler.cap, "manifest")
        )
    if not form.is_valid():
        return _dataset_page(request, dataset, form, status=400)
    data = form.cleaned_data
    upload = data["manifest"]
    try:
        result = manifests.create_run(
            dataset.name,
            data["window"],
            # spooled to disk by uploads.CappedUpload; none for a sitemap run
            upload.temporary_file_path() if upload else None,
            add=data["add"],
            scraper_version=data["scraper_version"] or None,
            actor=_actor(request),
            name=upload.name if upload else None,
        )
    except manifests.ManifestError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        return _dataset_page(request, dataset, form, exc.problems, status=400)
    for line in result.summary():
        messages.success(request, line)
    return redirect("dashboard:run", run_id=result.run.pk)


def _refused_manifest(request: HttpRequest, dataset: Dataset, message: str) -> HttpResponse:
    return _dataset_page(request, dataset, ManifestUploadForm(), status=413, refusal=message)
