"""Template filters for the dashboard. None of them marks text safe: output is autoescaped."""

from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


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
    return "; ".join(parts)


@register.inclusion_tag("dashboard/_provisional.html")
def provisional_flags(run: Any) -> dict[str, Any]:
    """The run's partitions flagged early while it collects (recovery.provisional)."""
    from recovery import provisional

    return {"run": run, "flags": provisional.shown_flags(run)}
