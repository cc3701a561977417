"""Keyset pagination: `?after=<cursor>` instead of OFFSET, and never a COUNT(*).

A page is the first `size` rows after the cursor in a fixed order that ends with a unique
column, so each page is one indexed range scan however deep the operator pages.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

PAGE_SIZE = 50


@dataclass
class Page:
    rows: list[Any]
    next_cursor: str  # "" on the last page


def page(
    qs: QuerySet,
    after: str | None,
    *,
    key: str = "pk",
    tiebreak: str | None = None,
    descending: bool = True,
    size: int = PAGE_SIZE,
) -> Page:
    """One page of `qs` ordered by `key` (then `tiebreak`, unique) after the cursor.

    The cursor is the last row's key value(s) as text; a malformed cursor starts from the top
    rather than erroring (a pasted URL should not 500).
    """
    fields = [key] if tiebreak is None else [key, tiebreak]
    prefix = "-" if descending else ""
    qs = qs.order_by(*(prefix + f for f in fields))
    if after:
        with contextlib.suppress(ValueError, TypeError, LookupError, ValidationError):
            qs = qs.filter(_after_filter(qs, fields, after, descending))
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    cursor = ""
    if more and rows:
        last = rows[-1]
        cursor = "|".join(str(_value(last, f)) for f in fields)
    return Page(rows=rows, next_cursor=cursor)


def _value(row: Any, field: str) -> Any:
    if isinstance(row, dict):
        return row[field]
    value = getattr(row, "pk" if field == "pk" else field)
    return value.isoformat() if hasattr(value, "isoformat") else value


def _after_filter(qs: QuerySet, fields: list[str], after: str, descending: bool) -> Q:
    op = "lt" if descending else "gt"
    parts = after.split("|")
    if len(parts) != len(fields):
        raise ValueError("cursor does not match the ordering")
    model = qs.model
    values = []
    for field, raw in zip(fields, parts, strict=True):
        model_field = model._meta.pk if field == "pk" else model._meta.get_field(field)
        values.append(model_field.to_python(raw))
    if len(fields) == 1:
        return Q(**{f"{fields[0]}__{op}": values[0]})
    first, second = fields
    return Q(**{f"{first}__{op}": values[0]}) | Q(
        **{first: values[0], f"{second}__{op}": values[1]}
    )
