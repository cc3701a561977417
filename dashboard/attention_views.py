"""The "needs attention" page and the count in every page's top bar (recovery.attention).

Each condition links to its list filtered to its rows, through the same query that counts them;
a user sees the conditions whose list they may open, and the top bar adds up those. The summary
is computed once per request (the page and its top bar share it).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from recovery import attention


@dataclass(frozen=True)
class Link:
    view: str
    params: tuple[tuple[str, str], ...]
    perm: str  # the list's own permission: without it the condition is not shown

    @property
    def href(self) -> str:
        query = urlencode(self.params)
        return reverse(self.view) + (f"?{query}" if query else "")


def _needs(key: str) -> tuple[tuple[str, str], ...]:
    return (("needs", key),)


LINKS: dict[str, Link] = {
    attention.FAILING_CANDIDATES: Link(
        "dashboard:runs", _needs(attention.FAILING_CANDIDATES), "recovery.view_run"
    ),
    attention.BLOCKED_RUNS: Link(
        "dashboard:runs", _needs(attention.BLOCKED_RUNS), "recovery.view_run"
    ),
    attention.UNREVIEWED_QUARANTINE: Link(
        "dashboard:runs", _needs(attention.UNREVIEWED_QUARANTINE), "recovery.view_run"
    ),
    # The reconcile queue shows what needs a decision unless told otherwise.
    attention.RECONCILE_WAITING: Link("dashboard:reconcile", (), "recovery.view_remotejob"),
    attention.FAILING_DELIVERIES: Link(
        "dashboard:deliveries",
        _needs(attention.FAILING_DELIVERIES),
        "recovery.view_outboxevent",
    ),
    attention.OVERDUE_SCHEDULES: Link(
        "dashboard:schedules", _needs(attention.OVERDUE_SCHEDULES), "recovery.view_schedule"
    ),
    attention.DEAD_WORKERS: Link(
        "dashboard:workers", (("status", "stale"),), "recovery.view_workerheartbeat"
    ),
}


def _item_href(key: str, item: attention.Item) -> str:
    """Where one row behind a condition is dealt with."""
    if key == attention.UNREVIEWED_QUARANTINE:
        return reverse("dashboard:quarantine", args=[item.pk])
    if key in attention.RUN_CONDITIONS:
        return reverse("dashboard:run", args=[item.pk])
    if key == attention.RECONCILE_WAITING:
        return reverse("dashboard:reconcile") + "?" + urlencode({"job": item.pk})
    if key == attention.FAILING_DELIVERIES:
        return reverse("dashboard:deliveries") + "?" + urlencode({"q": str(item.pk)})
    if key == attention.OVERDUE_SCHEDULES:
        # Among the overdue ones, where the row is (the whole list pages it anywhere).
        query = urlencode({"needs": attention.OVERDUE_SCHEDULES})
        return reverse("dashboard:schedules") + f"?{query}#schedule-{item.pk}"
    return reverse("dashboard:workers") + "?" + urlencode({"status": "stale", "q": item.label})


def summary(request: HttpRequest, *, items: bool = False) -> attention.Summary:
    """recovery.attention.summary(), once per request (with items once the page needs them)."""
    cached = getattr(request, "_attention", None)
    if cached is None or (items and not cached[1]):
        cached = (attention.summary(items=items), items)
        request._attention = cached  # type: ignore[attr-defined]
    return cached[0]


def visible(request: HttpRequest, found: attention.Summary) -> list[attention.Condition]:
    """The conditions whose list this user may open, in the page's order."""
    return [c for c in found.conditions if request.user.has_perm(LINKS[c.key].perm)]


@login_required
@require_GET
@permission_required("recovery.view_run", raise_exception=True)
def attention_page(request: HttpRequest) -> HttpResponse:
    shown = visible(request, summary(request, items=True))
    waiting = [
        {
            "condition": c,
            "href": LINKS[c.key].href,
            "items": [(item, _item_href(c.key, item)) for item in c.items],
        }
        for c in shown
        if c.count or c.note
    ]
    # "Checked, nothing found" only for a condition looked at in full.
    clear = [c.label for c in shown if not c.count and not c.note]
    return render(request, "dashboard/attention.html", {"waiting": waiting, "clear": clear})
