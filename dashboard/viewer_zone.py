"""Times in the viewer's time zone: a per-user setting, UTC until set.

In: the user's ViewerSettings.time_zone (an IANA name). Out: Django's current time zone for
the request, so every date a template prints is the viewer's local time, and `when` shows UTC
beside it on hover (dashboard_tags.when). The database, the logs, exports and the API stay in
UTC: this is how a page reads, not how anything is stored.

Why the session holds the name: the middleware runs on every request, and one more query per
page for a preference would be paid by every list. The name is copied from the row into the
session at log-in (the user_logged_in signal) and written to both when it changes; the
middleware only reads the session, which the page's login check loads anyway. It never writes
the session (a write would move its expiry) and never meets an outage itself: a session that
cannot be read means UTC, and the page then answers the outage's 503.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from functools import cache

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

SESSION_KEY = "viewer_time_zone"
DEFAULT = "UTC"


@cache
def zone_names() -> tuple[str, ...]:
    """Every zone this machine's tz database knows, UTC first, then by name."""
    names = sorted(zoneinfo.available_timezones() - {DEFAULT})
    return (DEFAULT, *names)


def check(name: str) -> str:
    """The name if it is a zone this machine knows, else ValueError naming it."""
    if name not in zone_names():
        raise ValueError(
            f"{name!r} is not a time zone this server knows (an IANA name, e.g. Europe/London)"
        )
    return name


def stored(user) -> str:
    from dashboard.models import ViewerSettings

    found = ViewerSettings.objects.filter(user=user).values_list("time_zone", flat=True).first()
    return found if found in zone_names() else DEFAULT


def on_login(sender, request: HttpRequest | None, user, **kwargs) -> None:
    """Copies the stored zone into the new session (connected in DashboardConfig.ready)."""
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_KEY] = stored(user)


def save(request: HttpRequest, name: str) -> None:
    """The user's zone from now on, in this session at once (other sessions: at next log-in)."""
    from dashboard.models import ViewerSettings

    check(name)
    user = request.user
    assert user.is_authenticated  # the view is login_required
    ViewerSettings.objects.update_or_create(user=user, defaults={"time_zone": name})
    request.session[SESSION_KEY] = name
    timezone.activate(zoneinfo.ZoneInfo(name))


class ViewerTimeZoneMiddleware:
    """Activates the viewer's zone for the request (after SessionMiddleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = _session_zone(request)
        if name == DEFAULT:
            timezone.deactivate()
            return self.get_response(request)
        timezone.activate(zoneinfo.ZoneInfo(name))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def _session_zone(request: HttpRequest) -> str:
    session = getattr(request, "session", None)
    if session is None:
        return DEFAULT
    try:
        name = session.get(SESSION_KEY)
    except DatabaseError:
        return DEFAULT
    return name if name in zone_names() else DEFAULT
