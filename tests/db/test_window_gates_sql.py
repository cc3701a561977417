"""The rules that compare windows, in SQL, equal a Python reference on generated windows.

Two windows of one dataset are generated: rows of a small pool of entities over two
partitions, each valid or invalid, some partitions quarantined, prices of every kind (plain
decimal text, JSON numbers, text float() reads or refuses, booleans, lists, nothing). The
reference below reads the generated rows only: the accepted ones (valid, partition not held),
a number exactly when float() reads the value and it is finite, percentile_cont by its
definition. The figures recovery.quality.window_sql computes (SQL on PostgreSQL, with its
Python fallback; a streamed read on SQLite) and the decisions recovery.quality.window_gates
takes must equal them. CI runs this on SQLite and PostgreSQL.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter

import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from recovery.models import Observation, RunPartition
from recovery.quality import window_gates, window_sql
from recovery.states.choices import RunState
from tests.support.acceptance import make_shop
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db

ENTITIES = [f"SKU-{i}" for i in range(8)]
PARTITIONS = ["a", "b"]
EDGES = ["", " ", "12.50", "+5", ".5", "5.", " 7 ", "1e3", "1_0", "inf", "nan", "-0", "abc"]
EDGES += ["\u00a0", "\u0661\u0660", "1" * 31, "0." + "0" * 27 + "1", "12345678901234567890"]

plain = st.from_regex(r"\A[+-]?[0-9]{1,9}(\.[0-9]{0,6})?\Z").map(str)
prices = st.one_of(
    plain,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False),
    st.sampled_from(EDGES),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6),
    st.lists(st.integers(0, 3), max_size=2),
)
rows = st.lists(
    st.tuples(st.sampled_from(ENTITIES), st.sampled_from(PARTITIONS), st.booleans(), prices),
    max_size=8,
    unique_by=lambda row: row[0],  # one observation per entity in a window
)
windows = st.tuples(rows, st.sets(st.sampled_from(PARTITIONS), max_size=1))
QUANTILES = [0.5, 0.9, 0.1, 0.25, 0.99]


def gates(q: float) -> list[dict]:
    return [
        {"name": "size", "kind": "entity_count_change", "max_drop": 0.2, "max_rise": 0.5},
        {"name": "kept", "kind": "disappeared_entities", "max_share": 0.25},
        {
            "name": "shift",
            "kind": "value_shift",
            "field": "price",
            "max_change": 0.3,
            "quantile": q,
        },
    ]


def build(dataset, window: str, generated, state: str):
    found, held = generated
    run = make_run(dataset, window=window, acceptance_state=state)
    for i, (entity, partition, valid, price) in enumerate(found):
        (task,) = make_tasks(run, 1, partition=partition, host=f"h{i}.test")
        payload = {"sku": entity, "title": "t"}
        if price is not None or i % 2:
            payload["price"] = price  # a JSON null half the time, the key missing otherwise
        Observation.objects.create(
            run=run,
            observation_key=uuid.uuid4().hex,
            entity_key=entity,
            window=window,
            partition=partition,
            payload=payload,
            payload_hash="0" * 64,
            source_task=task,
            validation_state="valid" if valid else "invalid",
        )
    for partition in PARTITIONS:
        RunPartition.objects.create(run=run, name=partition, quarantined=partition in held)
    return run


# --- the reference -----------------------------------------------------------------------


def accepted(generated):
    found, held = generated
    return [row for row in found if row[2] and row[1] not in held]


def ref_number(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def ref_percentile(values, q):
    """percentile_cont: the value at rank q(n - 1), linear between the ranks around it."""
    if not values:
        return None
    xs = sorted(values)
    rank = q * (len(xs) - 1)
    i, j = math.floor(rank), math.ceil(rank)
    if i == j:
        return xs[i]
    point = xs[i] + (rank - i) * (xs[j] - xs[i])
    if not math.isfinite(point):  # the difference beyond a float: window_sql's documented way
        point = xs[i] * (1 - (rank - i)) + xs[j] * (rank - i)
    return point


def ref_figures(generated, q):
    numbers = [n for n in (ref_number(row[3]) for row in accepted(generated)) if n is not None]
    return (len(numbers), ref_percentile(numbers, 0.5), ref_percentile(numbers, q))


def ref_change(before, after):
    if before == 0:
        return 0.0 if after == 0 else None
    change = (after - before) / abs(before)
    return change if math.isfinite(change) else None


def ref_decisions(previous, current, q):
    then, now = accepted(previous), accepted(current)
    out = {}
    if not then:
        out["size"] = out["kept"] = True
    else:
        change = (len(now) - len(then)) / len(then)
        out["size"] = not (-change > 0.2 or change > 0.5)
        now_keys = {row[0] for row in now}
        out["kept"] = sum(row[0] not in now_keys for row in then) / len(then) <= 0.25
    n_then, *before = ref_figures(previous, q)
    n_now, *after = ref_figures(current, q)
    if not n_then:
        out["shift"] = True
    elif not n_now:
        out["shift"] = False
    else:
        changes = [ref_change(b, a) for b, a in zip(before, after, strict=True)]
        out["shift"] = all(c is not None and abs(c) <= 0.3 for c in changes)
    return out


# --- the property --------------------------------------------------------------------------


@hsettings(max_examples=60)
@given(windows, windows, st.sampled_from(QUANTILES))
@example(
    ([("SKU-0", "a", True, "10.00"), ("SKU-1", "b", True, "20.00")], set()),
    ([("SKU-0", "a", True, "20.00"), ("SKU-1", "b", True, "40.00")], set()),
    0.9,
)
@example(
    ([("SKU-0", "a", True, 3), ("SKU-1", "a", True, " 4 "), ("SKU-2", "b", True, "1e1")], set()),
    ([("SKU-0", "a", True, "3"), ("SKU-2", "b", False, "9"), ("SKU-3", "b", True, 2.5)], {"a"}),
    0.5,
)
def test_the_sql_gates_equal_the_python_reference(previous, current, q):
    dataset = make_shop()
    before = build(dataset, "2026-11-30", previous, RunState.ACCEPTED)
    run = build(dataset, "2026-12-01", current, RunState.CANDIDATE)

    for generated, built in ((previous, before), (current, run)):
        expected = Counter(row[1] for row in accepted(generated))
        assert window_sql.entity_counts(built.pk) == dict(expected)
        assert window_sql.value_figures(built.pk, "price", q) == window_sql.ValueFigures(
            *ref_figures(generated, q)
        )
    now_keys = {row[0] for row in accepted(current)}
    gone = Counter(row[1] for row in accepted(previous) if row[0] not in now_keys)
    assert window_sql.disappeared(before.pk, run.pk) == dict(gone)

    results = window_gates.results_for(run, gates(q))
    decided = {r.rule: r.passed for r in results if r.partition == ""}
    assert decided == ref_decisions(previous, current, q)


def test_plain_prices_are_figured_in_sql_on_postgresql(postgres_only):
    """The ordinary case never falls back to Python: decimal text and JSON numbers."""
    dataset = make_shop()
    generated = (
        [
            ("SKU-0", "a", True, "12.50"),
            ("SKU-1", "a", True, 7),
            ("SKU-2", "b", True, 3.25),
            ("SKU-3", "b", True, "-0.5"),
            ("SKU-4", "b", True, "n/a"),  # not a number, decided so in SQL
            ("SKU-5", "b", True, ""),
            ("SKU-6", "b", True, True),
            ("SKU-7", "b", False, "99"),  # invalid: not accepted
        ],
        set(),
    )
    run = build(dataset, "2026-11-30", generated, RunState.ACCEPTED)
    figures = window_sql._pg_figures(run.pk, "price", 0.9)
    assert figures == window_sql.ValueFigures(4, 5.125, 10.850000000000001)
    assert figures == window_sql.ValueFigures(*ref_figures(generated, 0.9))
    # One value float() reads but the SQL does not decide sends the run to Python.
    odd = build(dataset, "2026-12-01", ([("SKU-0", "a", True, " 7 ")], set()), "accepted")
    assert window_sql._pg_figures(odd.pk, "price", 0.9) is None
    assert window_sql.value_figures(odd.pk, "price", 0.9) == window_sql.ValueFigures(1, 7.0, 7.0)


def test_the_databases_own_percentile_agrees_on_postgresql(postgres_only):
    """percentile_cont here is PostgreSQL's, rank for rank (checked against the server)."""
    values = [0.1, 0.2, 0.7, 1e-7, 3.0, 12.5, -4.25, 1e20]
    with connection.cursor() as cursor:
        for q in [*QUANTILES, 0.333, 0.01]:
            cursor.execute(
                "SELECT percentile_cont(%s) WITHIN GROUP (ORDER BY x) FROM unnest(%s::float8[]) x",
                [q, values],
            )
            assert cursor.fetchone()[0] == window_sql.percentile_cont(sorted(values), q)
