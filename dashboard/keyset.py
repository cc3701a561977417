"""Keyset pagination: `?after=<cursor>` or `?before=<cursor>` instead of OFFSET.

A page is the first `size` rows after the cursor in a fixed order that ends with a unique
column, so each page is one indexed range scan however deep the operator pages. The page before
a cursor is the same scan in the opposite direction (the order reversed, `size` rows taken, then
put back in the list's order), so walking back visits the forward pages in reverse. The cursor is
a row's sort values as a JSON array (the last row's for `after`, the first row's for `before`);
a cursor the order cannot use (malformed JSON, the wrong number of values, a value of the wrong
type or out of the column's range, a NUL or a lone surrogate that the database would refuse) is
a 400, never a 500 and never a silent page one. The page never counts; a list's bounded match
count is `capped_count`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import BadRequest, FieldDoesNotExist, ValidationError
from django.db import connections, models
from django.db.models import BooleanField, F, Func, Q, QuerySet, Value

PAGE_SIZE = 50
CURSOR_MAX = 4000  # characters; a longer `after` or `before` is not one of ours


class BadCursor(BadRequest):
    """The `after` or `before` value cannot be used with this list's order (answered with 400)."""


@dataclass(frozen=True)
class Order:
    """A list's order: `fields` (model fields or annotations), the last one unique."""

    fields: tuple[str, ...] = ("pk",)
    descending: bool = True

    def order_by(self) -> list[str]:
        prefix = "-" if self.descending else ""
        return [prefix + f for f in self.fields]

    def reversed(self) -> Order:
        return Order(self.fields, not self.descending)


@dataclass
class Page:
    rows: list[Any]
    next_cursor: str  # "" on the last page
    prev_cursor: str = ""  # "" on the first page


def page(
    qs: QuerySet,
    after: str | None,
    *,
    key: str = "pk",
    tiebreak: str | None = None,
    descending: bool = True,
    size: int = PAGE_SIZE,
    order: Order | None = None,
    before: str | None = None,
) -> Page:
    """One page of `qs` in `order` (or `key`, then `tiebreak`) after, or before, the cursor."""
    if order is None:
        order = Order((key,) if tiebreak is None else (key, tiebreak), descending)
    if after and before:
        raise BadCursor("a page is read after one cursor or before one, not both")
    if before:
        return _page_before(qs, before, order, size)
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
    # After a cursor there are rows before this page: the cursor's own row at least (our links
    # only carry a cursor a row wrote), so no query asks. Past the end (no rows), the page
    # before is the one before the cursor.
    previous = ""
    if after:
        previous = cursor_of(rows[0], order) if rows else after
    return Page(rows=rows, next_cursor=cursor, prev_cursor=previous)


def _page_before(qs: QuerySet, before: str, order: Order, size: int) -> Page:
    """The `size` rows just before the cursor, in `order`: the same index read backwards."""
    backwards = order.reversed()
    qs = qs.order_by(*backwards.order_by())
    values = parse_cursor(qs, order, before)
    qs = qs.filter(after_filter(backwards, values))
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size][::-1]
    previous = cursor_of(rows[0], order) if more and rows else ""
    # The cursor's row follows this page, so there is a next page whenever this one has rows.
    following = cursor_of(rows[-1], order) if rows else ""
    return Page(rows=rows, next_cursor=following, prev_cursor=previous)


def capped_count(qs: QuerySet, cap: int, order: Order) -> tuple[int, bool]:
    """How many rows `qs` holds, reading at most `cap + 1` of them: (count, whether capped).

    One `SELECT COUNT(*) FROM (SELECT id ... ORDER BY <the list's order> LIMIT cap + 1)`: the
    database stops after cap + 1 matches, so a million-row run costs what ten thousand rows do.
    The order is kept on purpose: it makes the count read the index the page reads. Without it
    PostgreSQL may count a run's tasks with a Seq Scan under the LIMIT, which is cheap only
    while the run's rows come first in the table; a run appended after millions of others'
    rows would be found only at the table's end.
    """
    n = qs.order_by(*order.order_by()).values("pk")[: cap + 1].count()
    return (cap, True) if n > cap else (n, False)


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
        # An annotation: an integer one (e.g. the HTTP status key) is checked as its output
        # field, any other (the URL sort key, a dataset name) is compared as text.
        annotation = qs.query.annotations.get(field)
        output = getattr(annotation, "output_field", None)
        if isinstance(output, models.IntegerField) != isinstance(raw, int):
            raise BadCursor(f"the page cursor has an unusable value for {field}") from None
        if isinstance(raw, str):
            return raw
        model_field = output
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

    Written as a row comparison, which a B-tree index over (a, b, c) reads as one range that
    starts at the cursor. Spelt out as `a > x OR (a = x AND b > y) ...` the index bounds only
    the first column: a cursor inside a large group of ties (the error class "" of nearly
    every task, HTTP status 200) made the database read the group from its start to the
    cursor, measured as a page halfway down 2.6 times slower at 300,000 tasks than at 10,000
    (bench/README.md, "Dashboard pages"). The leading `a >= x` is redundant but names the
    first column's bound for a planner that does not read the row comparison as a range.
    """
    op = "lt" if order.descending else "gt"
    bound = "lte" if order.descending else "gte"
    fields = order.fields
    if len(fields) == 1:
        return Q(**{f"{fields[0]}__{op}": values[0]})
    beyond = RowBeyond(fields, values, "<" if order.descending else ">")
    return Q(**{f"{fields[0]}__{bound}": values[0]}) & Q(beyond)


class RowBeyond(Func):
    """`(a, b, ...) > (x, y, ...)` (or `<`): SQL's row comparison, lexicographic."""

    output_field = BooleanField()

    def __init__(self, fields: tuple[str, ...], values: list[Any], op: str) -> None:
        if op not in ("<", ">") or len(fields) != len(values):
            raise ValueError("a row comparison needs < or > and one value per field")
        super().__init__(*(F(f) for f in fields), *(Value(v) for v in values))
        self.op = op

    def as_sql(self, compiler, connection, **extra):
        parts, params = [], []
        for expression in self.source_expressions:
            sql, more = compiler.compile(expression)
            parts.append(sql)
            params.extend(more)
        n = len(parts) // 2
        return f"({', '.join(parts[:n])}) {self.op} ({', '.join(parts[n:])})", params
