"""The demo's checklist page (showroom.demo_story); under `manage.py demo` it is the home page.

Apart from views.py so the demo's two views stay out of the product's pages; same rules:
decorators first, one engine call, a message, a redirect. On a database without the demo run
the page says so; the repaired-spec button is refused there. Outside demo mode (SALVAGE_DEMO,
set by `manage.py demo`) both are 404 for every role: the checklist tells the demo's story and
links each role to the demo's pages, which mean nothing on a deployment's data.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import engine
from recovery.showroom import demo_story


def demo_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """404 outside demo mode, before any permission is asked (one answer for every role)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.SALVAGE_DEMO:
            raise Http404("the checklist is the demo's: manage.py demo")
        return view(request, *args, **kwargs)

    return wrapped


@login_required
@demo_only
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
@demo_only
@require_POST
@permission_required("recovery.create_recovery_batch", raise_exception=True)
def load_repaired_spec(request: HttpRequest) -> HttpResponse:
    ok, outcome = engine.call(request, demo_story.load_repaired_spec, request.user.get_username())
    if ok:
        messages.success(request, f"Spec version 2 loaded ({outcome}): the price selector is fixed")
    return redirect("dashboard:demo")
