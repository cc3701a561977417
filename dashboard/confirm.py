"""The confirmation step of a consequential action: a page saying what it will do, then the POST.

A view shows `page()` for a GET or any POST without `confirmed=1` (the page's own button sends
it), so a plain form post, a bookmarked link or a replayed request changes nothing until the
operator has read the consequence (recovery.quality.confirmations) and confirmed.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from recovery.quality import confirmations


def confirmed(request: HttpRequest) -> bool:
    """True only for the confirmation page's own POST; any other request just shows the page."""
    return request.method == "POST" and request.POST.get("confirmed") == "1"


def page(
    request: HttpRequest,
    *,
    title: str,
    subject,
    consequence: confirmations.Consequence,
    button: str,
    back: str,
    form=None,
) -> HttpResponse:
    return render(
        request,
        "dashboard/confirm.html",
        {
            "title": title,
            "subject": subject,
            "consequence": consequence,
            "button": button,
            "back": back,
            "form": form,
        },
    )
