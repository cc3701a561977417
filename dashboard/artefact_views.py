"""Triage files of a failed rendered page, served so that nothing in them can run.

The screenshot's view lives with the task page (dashboard.run_views.attempt_screenshot); this
is its counterpart for the rendered HTML (recovery.fetch.artefacts.read_rendered_html), with the
same permissions. Scraped HTML is hostile: it is sent as `text/plain; charset=utf-8` with
`nosniff` (no browser may guess it is a page) and a CSP sandbox (no script, no origin even if
one did), so a `<script>` in it is shown as text and never runs.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from recovery.fetch import artefacts
from recovery.models import Attempt


@login_required
@require_GET
@permission_required(("recovery.view_task", "recovery.view_attempt"), raise_exception=True)
def attempt_rendered_html(request: HttpRequest, task_id: int, attempt_id) -> HttpResponse:
    """A failed rendered page's HTML, as inert text, to the roles that see its screenshot."""
    attempt = get_object_or_404(Attempt.objects.only("artefact"), pk=attempt_id, task_id=task_id)
    try:
        text = artefacts.read_rendered_html((attempt.artefact or {}).get("rendered_html"))
    except artefacts.ArtefactMissing as exc:
        raise Http404(str(exc)) from None
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = f'inline; filename="attempt-{attempt_id}-html.txt"'
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, max-age=3600"
    return response
