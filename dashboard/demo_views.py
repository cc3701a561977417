"""The demo's checklist page (recovery.demo_story); under `manage.py demo` it is the home page.

Apart from views.py so the demo's two views stay out of the product's pages; same rules:
decorators first, one engine call, a message, a redirect. On a database without the demo run
the page says so; the repaired-spec button is refused there.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import engine
from recovery import demo_story


@login_required
@require_GET
def story(request: HttpRequest) -> HttpResponse:
    # Every role follows the story: operators and admins, and the exporter for the last step.
    user = request.user
    if not (user.has_perm("recovery.view_run") or user.has_perm("recovery.export_dataset")):
        raise PermissionDenied
    story = demo_story.checklist()
    for step in story.steps:
        if step.link == "demo":
            step.href = ""  # the button below is the place
        elif step.link:
            args = [step.link_arg] if step.link_arg is not None else []
            step.href = reverse(f"dashboard:{step.link}", args=args)
        else:
            step.href = ""
    return render(request, "dashboard/demo.html", {"story": story})


@login_required
@require_POST
@permission_required("recovery.create_recovery_batch", raise_exception=True)
def load_repaired_spec(request: HttpRequest) -> HttpResponse:
    ok, outcome = engine.call(request, demo_story.load_repaired_spec, request.user.get_username())
    if ok:
        messages.success(request, f"Spec version 2 loaded ({outcome}): the price selector is fixed")
    return redirect("dashboard:demo")
