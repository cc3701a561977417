"""The pages every signed-in role shares: the home redirect, log-in, the glossary, the favicon,
and the 400 page (recovery.urls' handler400).

Each family of pages has its own views module, all thin in the same way: decorators first, then
fetch, one engine call, a message, a redirect. Every page needs a log-in and a permission checked
on the server; templates hide the buttons a user may not use, but the POST views refuse them
regardless. Lists are keyset-paged (`?after=`) with GET filters (dashboard.lists).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from dashboard import keyset, lists, login_throttle, middleware
from recovery.quality import figures

# The source file, not the collected copy: it exists whether or not collectstatic ran.
FAVICON = Path(settings.BASE_DIR) / "static" / "favicon.svg"


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


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Send each role to its first page: operators and admins to runs, exporters to their data
    (dashboard.data_views.data_home); in the demo, everyone to the demo's checklist."""
    if settings.SALVAGE_DEMO:
        return redirect("dashboard:demo")
    if request.user.has_perm("recovery.view_run"):
        return redirect("dashboard:runs")
    if request.user.has_perm("recovery.export_dataset"):
        return redirect("dashboard:data_home")
    raise PermissionDenied


@login_required
@require_GET
@permission_required("recovery.view_run", raise_exception=True)
def glossary(request: HttpRequest) -> HttpResponse:
    return render(request, "dashboard/glossary.html", {"terms": figures.GLOSSARY.items()})


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon itself, 200. A permanent redirect to the hashed static file was cached by
    browsers for ever, and pointed at a file the next release's collectstatic replaces."""
    response = HttpResponse(FAVICON.read_bytes(), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


# --- errors ----------------------------------------------------------------------------------


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400 with the navigation and, for a list's refusal, what it could not use.

    Django's own 400 view renders without the request (no navigation) and hides the reason;
    the reasons our lists raise name only the parameter, never data.
    """
    refusals = keyset.BadCursor | lists.BadList | middleware.NulParameter
    reason = str(exception) if isinstance(exception, refusals) else ""
    return render(request, "400.html", {"reason": reason}, status=400)
