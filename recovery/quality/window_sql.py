"""The reads of the rules that compare windows (recovery.quality.window_gates), in SQL.

Every figure is over a run's **accepted rows**: valid and outside its quarantined partitions,
what its export carries (recovery.states.row_states.exportable, spelled in SQL here).

- `entity_counts(run)`: accepted rows per partition (one row per entity in a window: the
  observation key is the entity key + window).
- `disappeared(previous, run)`: the previous run's accepted entities that are not among the
  run's, per partition of the previous run. PostgreSQL: NOT EXISTS (a hash anti-join; NOT IN
  over a million keys outgrows work_mem and rescans the subquery per row). SQLite: NOT IN,
  which it answers from one temporary index of the subquery (its correlated NOT EXISTS would
  scan the run's rows once per previous row: there is no (run, entity_key) index, and adding
  one would cost every commit an index write).
- `value_figures(run, field, q)`: how many accepted rows have a number in `field`, and the
  median and the q-quantile of those numbers, by PostgreSQL's `percentile_cont` (linear
  interpolation between the two closest ranks, `percentile_cont` here).

A value is a number exactly when `recovery.verdicts.number` reads it as a finite float (the
definition a `range` rule uses): a JSON number, or a text float() reads (`"12.50"`, `" 7 "`,
`"1e3"`), never a boolean. On PostgreSQL the SQL decides the usual values itself (a JSON
number or a plain decimal text such as "12.50", up to 30 characters, which its float8 input
rounds exactly as float() does; empty text and text holding a character float() never
accepts are not numbers) and says how many it could not decide; when there are any, the
figures are computed in Python from a streamed read instead. SQLite has no percentile
function: there the figures are always computed in Python, over the rows read in id order
(`python_figures`). tests/db/test_window_gates.py checks on both databases that the figures
equal a reference computed from the generated payloads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast

from recovery.models import Observation
from recovery.quality.validation_sql import _NOT_IN_FLOAT
from recovery.states import row_states
from recovery.verdicts import number

# Longest JSON number or plain decimal text PostgreSQL's SQL reads itself: float8 has room for
# every such value (no overflow, no underflow), and both sides round it correctly.
_DECIDED_CHARS = 30
_PLAIN_DECIMAL = "^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)$"
_ASCII_SPACE = " \t\n\r\x0b\x0c"


@dataclass(frozen=True)
class ValueFigures:
    """The numbers of one field among a run's accepted rows: how many, median, q-quantile."""

    n: int
    median: float | None
    quantile: float | None


def _accepted(alias: str) -> str:
    """The WHERE of a run's accepted rows (parameters: run id, 'valid', run id, True)."""
    return (
        f"{alias}.run_id = %s AND {alias}.validation_state = %s AND {alias}.partition NOT IN "
        "(SELECT p.name FROM recovery_runpartition p WHERE p.run_id = %s AND p.quarantined = %s)"
    )


def _accepted_params(run_id: int) -> list:
    return [run_id, Observation.Validation.VALID, run_id, True]


def entity_counts(run_id: int) -> dict[str, int]:
    """{partition: accepted rows} of one run."""
    sql = f"SELECT o.partition, COUNT(*) FROM recovery_observation o WHERE {_accepted('o')} "
    sql += "GROUP BY o.partition"
    with connection.cursor() as cursor:
        cursor.execute(sql, _accepted_params(run_id))
        return {partition: n for partition, n in cursor.fetchall()}


def disappeared(previous_id: int, run_id: int) -> dict[str, int]:
    """{partition of the previous run: its accepted entities not accepted in the run}."""
    if connection.vendor == "postgresql":
        absent = (
            "NOT EXISTS (SELECT 1 FROM recovery_observation c "
            f"WHERE c.entity_key = o.entity_key AND {_accepted('c')})"
        )
    else:
        absent = (
            "o.entity_key NOT IN (SELECT c.entity_key FROM recovery_observation c "
            f"WHERE {_accepted('c')})"
        )
    sql = (
        f"SELECT o.partition, COUNT(*) FROM recovery_observation o WHERE {_accepted('o')} "
        f"AND {absent} GROUP BY o.partition"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*_accepted_params(previous_id), *_accepted_params(run_id)])
        return {partition: n for partition, n in cursor.fetchall()}


def percentile_cont(ordered: Sequence[float], q: float) -> float | None:
    """PostgreSQL's percentile_cont over ascending values: the value at rank q * (n - 1),
    interpolated linearly between the two ranks around it (None for no values)."""
    if not ordered:
        return None
    rank = q * (len(ordered) - 1)
    below, above = math.floor(rank), math.ceil(rank)
    low = ordered[below]
    if above == below:
        return low
    # float8_lerp's arithmetic, in its order, so both give the same float.
    value = low + (rank - below) * (ordered[above] - low)
    if not math.isfinite(value):
        # high - low beyond a float (values near ±1.8e308, which PostgreSQL's SQL never reads
        # here: it leaves them to this function): the same point, weighted the other way.
        fraction = rank - below
        value = low * (1 - fraction) + ordered[above] * fraction
    return value


def value_figures(run_id: int, field: str, q: float) -> ValueFigures:
    if connection.vendor == "postgresql":
        figures = _pg_figures(run_id, field, q)
        if figures is not None:
            return figures
    return python_figures(run_id, field, q)


def python_figures(run_id: int, field: str, q: float) -> ValueFigures:
    """The figures from the accepted rows' payloads read in id order and parsed by Python."""
    values = []
    rows = (
        row_states.exportable(run_id)
        .order_by("pk")
        .annotate(payload_text=Cast("payload", TextField()))
        .values_list("payload_text", flat=True)
        .iterator(chunk_size=2000)
    )
    for text in rows:
        payload = json.loads(text) if text else None
        if not isinstance(payload, dict):
            continue
        value = number(payload.get(field))
        if value is not None and math.isfinite(value):
            values.append(value)
    values.sort()
    return ValueFigures(len(values), percentile_cont(values, 0.5), percentile_cont(values, q))


def _pg_figures(run_id: int, field: str, q: float) -> ValueFigures | None:
    """The figures in one aggregate, or None when some value is left to Python."""
    not_float = "[" + "".join("\\" + c if c in "\\]^-[" else c for c in _NOT_IN_FLOAT) + "]"
    plain = f"(length(f.t) <= {_DECIDED_CHARS} AND f.t ~ %s)"
    sql = (
        "SELECT COUNT(x), COALESCE(SUM(u), 0), "
        "percentile_cont(ARRAY[0.5, %s]::double precision[]) WITHIN GROUP (ORDER BY x) "
        "FROM (SELECT "
        f"CASE WHEN f.k = 'number' AND length(f.t) <= {_DECIDED_CHARS} THEN f.t::double precision "
        f"WHEN f.k = 'string' AND {plain} THEN f.t::double precision END AS x, "
        f"CASE WHEN f.k = 'number' THEN CASE WHEN length(f.t) > {_DECIDED_CHARS} THEN 1 ELSE 0 END "
        f"WHEN f.k = 'string' THEN CASE WHEN {plain} THEN 0 WHEN btrim(f.t, %s) = '' THEN 0 "
        "WHEN f.t ~ %s THEN 0 ELSE 1 END ELSE 0 END AS u "
        "FROM recovery_observation o CROSS JOIN LATERAL (SELECT "
        "jsonb_typeof(o.payload -> %s) AS k, o.payload ->> %s AS t OFFSET 0) f "
        f"WHERE {_accepted('o')}) s"
    )
    params = [
        q,
        _PLAIN_DECIMAL,
        _PLAIN_DECIMAL,
        _ASCII_SPACE,
        not_float,
        field,
        field,
        *_accepted_params(run_id),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        n, undecided, found = cursor.fetchone()
    if undecided:
        return None
    median, quantile = found if found is not None else (None, None)
    return ValueFigures(n, median, quantile)
