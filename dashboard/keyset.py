"""Keyset pagination: `?after=<cursor>` instead of OFFSET, and never a COUNT(*).

A page is the first `size` rows after the cursor in a fixed order that ends with a unique
column, so each page is one indexed range scan however deep the operator pages. The cursor is
the last row's sort values as a JSON array; a cursor the order cannot use (malformed JSON, the
wrong number of values, a value of the wrong type or out of the column's range, a NUL or a lone
surrogate that the database would refuse) is a 400, never a 500 and never a silent page one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import BadRequest, FieldDoesNotExist, ValidationError
from django.db import connections, models
from django.db.models import Q, QuerySet

PAGE_SIZE = 50
CURSOR_MAX = 4000  # characters; a longer `after` is not one of ours


class BadCursor(BadRequest):
    """The `after` value cannot be used with this list's order (answered with 400)."""


@dataclass(frozen=True)
class Order:
    """A list's order: `fields` (model fields or annotations), the last one unique."""

    fields: tuple[str, ...] = ("pk",)
    descending: bool = True

    def order_by(self) -> list[str]:
        prefix = "-" if self.descending else ""
        return [prefix + f for f in self.fields]


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
    order: Order | None = None,
) -> Page:
    """One page of `qs` in `order` (or `key`, then `tiebreak`) after the cursor."""
    if order is None:
        order = Order((key,) if tiebreak is None else (key, tiebreak), descending)
    qs = qs.order_by(*order.order_by())
    if after:
        values = parse_cursor(qs, order, after)
        qs = qs.filter(after_filter(order, values))
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    cursor = ""
    if more and rows:
        cursor = cursor_of(rows[-1], order)
    return Page(rows=rows, next_cursor=cursor)


def cursor_of(row: Any, order: Order) -> str:
    return json.dumps([_value(row, f) for f in order.fields], separators=(",", ":"))


def _value(row: Any, field: str) -> Any:
    value = row[field] if isinstance(row, dict) else getattr(row, field)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, int | str | type(None)):
        return value
    return str(value)


def parse_cursor(qs: QuerySet, order: Order, after: str) -> list[Any]:
    """The cursor's values, each converted and checked as its column would store it."""
    if len(after) > CURSOR_MAX:
        raise BadCursor("the page cursor is too long")
    try:
        raw = json.loads(after)
    except ValueError:
        raise BadCursor("the page cursor is not one this list wrote") from None
    if not isinstance(raw, list) or len(raw) != len(order.fields):
        raise BadCursor("the page cursor does not match this list's order")
    return [_convert(qs, field, value) for field, value in zip(order.fields, raw, strict=True)]


def _convert(qs: QuerySet, field: str, raw: Any) -> Any:
    if raw is None or isinstance(raw, bool | float | list | dict):
        raise BadCursor(f"the page cursor has an unusable value for {field}")
    if isinstance(raw, str):
        _check_text(field, raw)
    model = qs.model
    try:
        model_field = model._meta.pk if field == "pk" else model._meta.get_field(field)
    except FieldDoesNotExist:
        # An annotation (e.g. the URL sort key): compared as text.
        if not isinstance(raw, str):
            raise BadCursor(f"the page cursor has an unusable value for {field}") from None
        return raw
    try:
        value = model_field.to_python(raw)
    except (ValidationError, ValueError, TypeError, OverflowError):
        raise BadCursor(f"the page cursor has an unusable value for {field}") from None
    if isinstance(value, str):
        _check_text(field, value)
    if isinstance(model_field, models.IntegerField | models.AutoField):
        low, high = connections[qs.db].ops.integer_field_range(model_field.get_internal_type())
        if (low is not None and value < low) or (high is not None and value > high):
            raise BadCursor(f"the page cursor's {field} is out of range")
    if isinstance(model_field, models.DateTimeField) and value.tzinfo is None:
        raise BadCursor(f"the page cursor's {field} has no time zone")
    return value


def _check_text(field: str, value: str) -> None:
    # PostgreSQL refuses NUL in text, and a lone surrogate cannot be encoded for the wire.
    if "\x00" in value:
        raise BadCursor(f"the page cursor's {field} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadCursor(f"the page cursor's {field} is not valid text") from None


def after_filter(order: Order, values: list[Any]) -> Q:
    """Rows strictly after `values` in `order`: (a, b, c) > (x, y, z), lexicographically.

    The leading `a >= x` is redundant but lets the database start the index range at the
    cursor instead of filtering from the top of the list.
    """
    op = "lt" if order.descending else "gt"
    bound = "lte" if order.descending else "gte"
    fields = order.fields
    after = Q()
    for i in range(len(fields)):
        term = Q(**{f"{fields[j]}": values[j] for j in range(i)}) & Q(
            **{f"{fields[i]}__{op}": values[i]}
        )
        after |= term
    if len(fields) == 1:
        return after
    return Q(**{f"{fields[0]}__{bound}": values[0]}) & after
