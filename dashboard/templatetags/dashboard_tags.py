"""Template filters and tags for the dashboard. Text is escaped; tags build HTML by format_html."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from recovery.delivery.outbox import public_label
from recovery.quality import figures

register = template.Library()


@register.filter
def destination(label: str) -> str:
    """A delivery's destination as a page may show it: never a user, password or query."""
    return public_label(label or "")


# Where a long URL may wrap: after each / ? & = # (not between the two slashes after the
# scheme), so a line ends at a path segment or a query parameter instead of mid-word; a segment
# longer than the cell still wraps (overflow-wrap in the stylesheet).
_URL_BREAKS = re.compile(r"(?<=[/?&=#])(?!/)(?=.)")


@register.filter
def breakable(url: Any) -> str:
    """A URL escaped, with a line-break opportunity (<wbr>) after each / ? & = #."""
    pieces = _URL_BREAKS.split(str(url or ""))
    return mark_safe("<wbr>".join(str(escape(piece)) for piece in pieces))


@register.filter
def get(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key, "")
    except AttributeError:
        return ""


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON as plain text (the template escapes it like any other text)."""
    if value in (None, "", {}, []):
        return ""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def duration_minutes(value: float | None) -> str:
    if value is None:
        return "unknown"
    minutes = round(value)
    if minutes < 1:
        return "< 1 min"
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


@register.filter
def seconds_between(end: Any, start: Any) -> str:
    if not end or not start:
        return ""
    return f"{(end - start).total_seconds():.2f} s"


@register.filter
def selection_summary(selection: Any) -> str:
    """A recovery batch's selection as one line: "partitions: a, b; error classes: x"."""
    if not isinstance(selection, dict):
        return ""
    parts = []
    for key in ("partitions", "page_types", "error_classes", "rules"):
        values = selection.get(key) or []
        if values:
            parts.append(f"{key.replace('_', ' ')}: {', '.join(map(str, values))}")
    tasks = selection.get("tasks") or []
    if tasks:  # rows selected on a task list: how many, not every id
        parts.append(f"{len(tasks)} selected task{'' if len(tasks) == 1 else 's'}")
    return "; ".join(parts)


@register.inclusion_tag("dashboard/_attention_link.html", takes_context=True)
def attention_link(context: Any) -> dict[str, Any]:
    """The top bar's "Attention" link with the count of what needs someone (dashboard.
    attention_views), for users who may open the page; nothing on pages without a user."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.has_perm("recovery.view_run"):
        return {"show": False}
    from dashboard import attention_views

    shown = attention_views.visible(request, attention_views.summary(request))
    total = sum(c.count for c in shown)
    waiting = [f"{c.label}: {c.shown}" for c in shown if c.count]
    return {
        "show": True,
        "total": total,
        "capped": any(c.capped for c in shown),
        "title": "; ".join(waiting) or "nothing needs attention",
    }


@register.inclusion_tag("dashboard/_provisional.html")
def provisional_flags(run: Any) -> dict[str, Any]:
    """The run's partitions flagged early while it collects (recovery.quality.provisional)."""
    from recovery.quality import provisional, provisional_shift

    return {
        "run": run,
        "flags": provisional.shown_flags(run),
        "shifts": provisional_shift.shown(run),
    }


@register.simple_tag
def list_href(listing: Any, **changes: Any) -> str:
    """A link to the same list with `changes` (None or "" drops a parameter); the cursor goes
    (`after` and `before`), the page size stays.

    One leading "?" and no blank parameters, whatever the current URL holds.
    """
    changes.setdefault("after", None)
    changes.setdefault("before", None)
    return listing.href(**{k: (None if v is None else str(v)) for k, v in changes.items()})


@register.simple_tag
def sort_header(listing: Any, column: str, label: str) -> str:
    """A column header that sorts the list by `column` (an order an index serves)."""
    if not listing.can_sort(column):
        return label  # no index serves this order with the current filters
    arrow = listing.sort_arrow(column)
    return format_html(
        '<a class="sort{}" href="{}">{}{}</a>',
        " sorted" if arrow else "",
        listing.sort_href(column),
        label,
        f" {arrow}" if arrow else "",
    )


@register.filter
def when(value: Any) -> str:
    """A time as "5 min ago" (or "in 5 min"), the absolute time to the second on hover."""
    if not isinstance(value, datetime):
        return ""
    seconds = (timezone.now() - value).total_seconds()
    absolute = timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")
    if timezone.get_current_timezone_name() != "UTC":  # the viewer's zone, and UTC beside it
        absolute += value.astimezone(UTC).strftime(" (%Y-%m-%d %H:%M:%S UTC)")
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(timespec="seconds"),
        absolute,
        relative(seconds),
    )


def relative(seconds: float) -> str:
    """Seconds before now (negative: after) in the largest unit that keeps a whole number."""
    ago = seconds >= 0
    s = abs(seconds)
    if s < 5:
        return "just now"
    if s < 90:
        text = f"{int(s)} s"
    elif s < 90 * 60:
        text = f"{round(s / 60)} min"
    elif s < 36 * 3600:
        text = f"{round(s / 3600)} h"
    else:
        text = f"{round(s / 86400)} days"
    return f"{text} ago" if ago else f"in {text}"


@register.filter
def stamp(value: Any) -> str:
    """An absolute time to the second, never with microseconds ("" for none)."""
    if not isinstance(value, datetime):
        return ""
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


@register.simple_tag
def url_with(view: str, *args: Any, **params: Any) -> str:
    """reverse(view, args) plus the non-blank `params` as a query string (no `key=` links)."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return reverse(view, args=args) + (f"?{query}" if query else "")


@register.filter
def audit_object_url(entry: Any) -> str:
    """The dashboard page of an audit entry's object ("" when it has none)."""
    kind, pk = entry.object_type, entry.object_id
    detail = entry.detail if isinstance(entry.detail, dict) else {}
    run = detail.get("run")
    if not pk:
        return ""
    try:
        if kind == "run":
            return reverse("dashboard:run", args=[int(pk)])
        if kind == "task":
            return reverse("dashboard:task", args=[int(pk)])
        if kind == "recoverybatch":
            return reverse("dashboard:batch", args=[int(pk)])
        if kind == "remotejob":
            return reverse("dashboard:reconcile") + "?" + urlencode({"state": "any", "job": pk})
        if kind == "outboxevent":
            return reverse("dashboard:deliveries") + "?" + urlencode({"q": pk})
        if kind in ("triagenote", "runpartition") and run:
            return reverse("dashboard:quarantine", args=[int(run)])
    except (TypeError, ValueError):
        return ""
    return ""


@register.filter
def definition(key: str) -> str:
    """A figure's one definition (recovery.quality.figures.GLOSSARY), for its tooltip."""
    return figures.definition(key)


@register.filter
def percent(share: float | None) -> str:
    return "—" if share is None else f"{100 * share:.1f}%"


@register.filter
def per_minute(rate: float | None) -> str:
    return "none" if rate is None else f"{rate:.1f}/min"
