"""Bulk actions on a list's selected rows (Django admin's actions, NetBox's bulk buttons).

A list page draws a checkbox per row (`name="pk"`, tied to the form `bulk` by its `form`
attribute, so a row's own buttons keep their own forms) and an action bar (_bulk_bar.html): the
action select and the list's query string (`query`), so the filters survive the action. Its POST
goes to the list's bulk view, which answers any POST without `confirmed=1` and the count the
confirmation page showed (`expected`) with that page: what will change, with the exact count
(bulk_confirm.html). Only the page's own POST acts, through one engine call that counts again
under its lock and refuses when the count moved; then a message "N …" and a redirect to the list
with its filters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render

from recovery.quality.confirmations import Consequence

# Each list's actions, (value, label), in its action select; the list's bulk view does them.
# A run's task lists (run_tasks, quarantine): a recovery batch of the selected tasks.
TASK_ACTIONS = [("rerun", "Rerun the selected tasks (a recovery batch)…")]
# The reconcile queue: one decision for the selected jobs (attaching needs each job's own id).
RECONCILE_ACTIONS = [
    ("dismiss", "Dismiss the selected jobs (one reason)…"),
    ("replace", "Replace the selected jobs with new paid jobs…"),
]
# Deliveries: the selected ones, or every failing one whatever is selected.
DELIVERY_ACTIONS = [
    ("retry", "Retry the selected deliveries…"),
    ("retry_failing", "Retry every failing delivery (failed or uncertain)…"),
]
SCHEDULE_ACTIONS = [
    ("pause", "Pause the selected schedules…"),
    ("resume", "Resume the selected schedules…"),
]

MAX_SELECTED = 500  # ids read from one POST (each engine function has its own, lower, bound)
MAX_QUERY = 2000  # characters of the list's query string kept for the way back


@dataclass
class Chosen:
    """What a bulk POST carries."""

    action: str
    ids: list[str]
    query: str  # the list's filters, re-encoded without blank values
    expected: int  # the count the confirmation page showed; 0 before it was shown
    confirmed: bool  # the confirmation page's own POST
    list_name: str = ""  # which list it came from, where one view serves several


def _expected(raw: str | None) -> int:
    try:
        return max(int(raw or 0), 0)
    except ValueError:
        return 0


def _query(raw: str) -> str:
    params = QueryDict(raw[:MAX_QUERY], mutable=True)
    for key in [k for k, values in params.lists() if not any(values)]:
        del params[key]
    return params.urlencode()


def read(request: HttpRequest) -> Chosen:
    ids = [value for value in request.POST.getlist("pk") if value][:MAX_SELECTED]
    expected = _expected(request.POST.get("expected"))
    return Chosen(
        action=request.POST.get("action", ""),
        ids=list(dict.fromkeys(ids)),  # once each, in the order the page listed them
        query=_query(request.POST.get("query", "")),
        expected=expected,
        # "confirmed" without the count the page showed is not a confirmation either.
        confirmed=request.POST.get("confirmed") == "1" and expected > 0,
        list_name=request.POST.get("list", "")[:64],
    )


def back(list_url: str, chosen: Chosen) -> str:
    """The list the action came from, with its filters."""
    return f"{list_url}?{chosen.query}" if chosen.query else list_url


@dataclass
class Row:
    """One row of the confirmation page's list of what will change."""

    label: str
    href: str = ""
    detail: str = ""


@dataclass
class Page:
    title: str
    count: int  # how many rows change: the count confirmed, sent back as `expected`
    noun: str  # what they are, as the count reads ("task" or "tasks")
    consequence: Consequence
    rows: list[Row]
    button: str
    back: str
    skipped: list[str] = field(default_factory=list)  # selected rows left alone, and why
    fields: Any = None  # a form whose fields the confirmation asks for (a reason...)


def page(request: HttpRequest, chosen: Chosen, shown: Page) -> HttpResponse:
    """The confirmation page: nothing has changed yet."""
    refusals = list(shown.consequence.refusals)
    if not shown.count:
        refusals.append("Nothing selected can be changed this way now.")
    return render(
        request,
        "dashboard/bulk_confirm.html",
        {"chosen": chosen, "shown": shown, "refusals": refusals},
    )


def noun(n: int, word: str, plural: str = "") -> str:
    """ "task" for 1, "tasks" (or `plural`) for any other count."""
    return word if n == 1 else plural or word + "s"


def counted(n: int, word: str, plural: str = "") -> str:
    """ "1 task", "3 tasks", "2 deliveries" (with `plural`)."""
    return f"{n} {noun(n, word, plural)}"
