"""The dashboard's middleware.

- A strict Content-Security-Policy on every response (Django 5.2 has no built-in CSP).
  Scripts and styles come only from our own static files; inline script never runs, so even a
  scraped payload that escaped escaping could not execute. SVG charts use attributes, not
  styles.
- A database outage answers every page with a styled 503 ("the database is not answering;
  this page retries") and one log line per outage, not a 500 and a traceback per request.
- A NUL character in a query parameter is refused with the 400 page, naming the parameter,
  before any view runs (PostgreSQL refuses NUL in text: the query would be an HTTP 500).
- A 405 (a GET on a POST-only action, from `require_POST`/`require_http_methods`) is the styled
  405 page like the 400/403/404 ones: Django has no handler405, and its 405 has an empty body.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from recovery.ops import outage

# Seconds before the 503 page reloads itself (and Retry-After says the same).
RETRY_SECONDS = 10

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response


class MethodNotAllowedPageMiddleware:
    """An empty 405 (django.http.HttpResponseNotAllowed) becomes templates/405.html, its Allow
    header kept. A 405 that says something itself (the API's JSON) is left as it is."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405 or response.streaming or response.content:
            return response
        allowed = response.get("Allow", "")
        page = render(request, "405.html", {"allowed": allowed}, status=405)
        if allowed:
            page["Allow"] = allowed
        return page


class DatabaseOutageMiddleware:
    """A view (or its template) that fails because the database does not answer gets the 503
    page; the outage is logged once per process when it begins and once when it ends
    (recovery.ops.outage.OutageNotice), and Django logs nothing per request for it. Any other
    error, a database error the database answers for included, is raised as before."""

    notice = outage.OutageNotice("web")  # one per process: gunicorn's threads share it

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not getattr(response, "_database_outage", False):
            self.notice.check_back()
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not self.notice.noticed(exception):
            return None
        # The page names no user and reads no session: nothing in it touches the database.
        response = render(request, "503.html", {"retry_seconds": RETRY_SECONDS}, status=503)
        response["Retry-After"] = str(RETRY_SECONDS)
        response["Cache-Control"] = "no-store"
        response._database_outage = True  # type: ignore[attr-defined]
        response._has_been_logged = True  # type: ignore[attr-defined]  # no line per request
        return response


class NulParameter(BadRequest):
    """A query parameter holding a NUL character (answered with the 400 page, naming it)."""


class RefuseNulMiddleware:
    """Refuse a NUL in any query parameter's name or value, for every page and CSV at once.

    PostgreSQL cannot store or compare a NUL inside text, so a filter such as
    `/schedules/?dataset=%00` failed inside its query (an HTTP 500; SQLite answers). No
    parameter of ours has a use for one, so it is refused before any view reads the database.
    Raised here, the BadRequest reaches recovery.urls' handler400 like a list's refusal.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                shown = name.replace("\x00", "\\x00")
                raise NulParameter(f"{shown}: contains a NUL character")
        return self.get_response(request)
