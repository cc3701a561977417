"""The viewer's own settings page: the time zone the dashboard's times are shown in.

Any user with a role (who sees pages with times on them), for themselves only; a preference,
so not audited (it changes how a page reads, nothing the product does).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from dashboard import viewer_zone


class ZoneForm(forms.Form):
    time_zone = forms.CharField(
        max_length=64,
        label="Time zone",
        help_text="An IANA name, e.g. Europe/London or America/New_York; UTC shows on hover.",
    )

    def clean_time_zone(self) -> str:
        try:
            return viewer_zone.check(self.cleaned_data["time_zone"].strip())
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc


@login_required
@require_http_methods(["GET", "POST"])
def account_settings(request: HttpRequest) -> HttpResponse:
    if not any(request.user.has_perm(p) for p in ("recovery.view_run", "recovery.export_dataset")):
        raise PermissionDenied
    current = timezone.get_current_timezone_name()
    form = ZoneForm(request.POST or None, initial={"time_zone": current})
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["time_zone"]
        viewer_zone.save(request, name)
        messages.success(request, f"Times are now shown in {name}.")
        return redirect("dashboard:account_settings")
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "dashboard/account_settings.html",
        {"form": form, "zones": viewer_zone.zone_names(), "current": current},
        status=status,
    )
