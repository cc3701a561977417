"""Validation in SQL (recovery.quality.validation_sql) gives what the Python definition gives.

Generated runs with every value rule kind, required fields on one page type and a partition
rule, over values at and around the edges (exactly at min/max, empty, missing, non-numeric
strings, Unicode, numbers where text is expected). The SQL pass (plus Python for what it leaves
undecided, as production runs it) must equal judging every observation in Python, for each
partition's counts and for each observation's state. CI runs this on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from recovery.models import Observation
from recovery.quality import validation, validation_sql
from recovery.verdicts import Rules
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db

RULES = [
    {"name": "price_range", "kind": "range", "field": "price", "min": 0, "max": 10.5},
    {"name": "qty_min", "kind": "range", "field": "qty", "min": -3},
    {"name": "cur_enum", "kind": "enum", "field": "cur", "values": ["EUR", "café", 1, "€"]},
    {"name": "sku_pattern", "kind": "pattern", "field": "sku", "pattern": r"^SKU-\d+$"},
]
REQUIRED = {"product": ["title", "sku"], "listing": []}
WATCHED = {"price", "title"}
SPEC = {
    "page_types": {
        "product": {
            "fields": {f: {"selector": f".{f}", "required": True} for f in ("title", "sku")}
        },
        "listing": {"fields": {}},
    },
    "rules": RULES
    + [
        {"name": f"{f}_share", "kind": "partition_invalid_share", "field": f, "max": 0.5}
        for f in sorted(WATCHED)
    ],
}
JUDGED_BY = Rules.of(SPEC)

EDGES = [
    "",
    " ",
    "\t\n",
    "\u00a0",
    "\u3000",
    "0",
    "10.5",
    "10.50",
    "10.51",
    "-0",
    "+5",
    ".5",
    "5.",
    " 5 ",
    "1e1",
    "1_0",
    "inf",
    "nan",
    "NaN",
    "-inf",
    "abc",
    "N/A",
    "\u0661\u0660",
    "\uff15",
    "EUR",
    "eur",
    "café",
    "€",
    "SKU-12",
    "SKU-",
    "SKU-\u0661",
    "1.000000000000001",
    "12345678901234567890",
    "0.30000000000000004",
    "-3",
    "-3.0000001",
    "--1",
    "1.2.3",
    ".",
    "-",
    "x\u00a0",
]
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.sampled_from([0, 10, 10.5, 10.500001, -3, -3.5, 2**53, 2**53 + 1, 1e300, -0.0]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(EDGES),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6),
    st.lists(st.integers(0, 3), max_size=2),
)
payloads = st.dictionaries(st.sampled_from(["price", "qty", "cur", "sku", "title"]), values)
observations = st.lists(
    st.tuples(st.sampled_from(["a", "b", "ü"]), st.sampled_from(["product", "listing"]), payloads),
    min_size=1,
    max_size=10,
)


def make_observations(rows) -> object:
    run = make_run()
    for i, (partition, page_type, payload) in enumerate(rows):
        (task,) = make_tasks(run, 1, partition=partition, page_type=page_type, host=f"h{i}.test")
        key = uuid.uuid4().hex
        Observation.objects.create(
            run=run,
            observation_key=key,
            entity_key=key,
            window=run.window,
            partition=partition,
            payload=payload,
            payload_hash=key,
            source_task=task,
        )
    return run


def test_the_rules_here_are_the_ones_the_sql_is_given():
    assert list(JUDGED_BY.value_rules) == RULES
    assert JUDGED_BY.required == {"product": ("sku", "title")}
    assert JUDGED_BY.watched == tuple(sorted(WATCHED))


def in_python(run):
    """Every observation judged by the Python definition: tallies and (partition, state,
    verdict bits) by pk."""
    tallies = defaultdict(validation._Tally)
    states = {}
    rows = Observation.objects.filter(run=run).values_list(
        "pk", "partition", "payload", "source_task__page_type"
    )
    for pk, partition, payload, page_type in rows:
        bits = JUDGED_BY.verdict(payload, page_type)
        tallies[partition].add(JUDGED_BY, bits)
        states[pk] = (partition, JUDGED_BY.state(bits), bits)
    return tallies, states


def in_sql(run):
    """As production runs it: the SQL pass, Python for the undecided rows."""
    verdicts = validation_sql.RowVerdicts(connection.vendor, RULES, REQUIRED, WATCHED)
    found = validation_sql.tally(run.pk, verdicts, stale_for=JUDGED_BY.digest)
    tallies = defaultdict(validation._Tally)
    for partition, t in found.tallies.items():
        mine = tallies[partition]
        mine.total, mine.complete, mine.valid = t.total, t.complete, t.valid
        mine.fails.update(t.fails)
        mine.field_invalid.update(t.field_invalid)
    python_states = {}
    for pk, partition, payload, page_type in found.undecided:
        bits = JUDGED_BY.verdict(payload, page_type)
        tallies[partition].add(JUDGED_BY, bits)
        python_states[pk] = JUDGED_BY.state(bits)
    return verdicts, tallies, python_states


def flat(tallies):
    return {
        p: (
            t.total,
            t.complete,
            t.valid,
            {k: v for k, v in t.fails.items() if v},
            {k: v for k, v in t.field_invalid.items() if v},
        )
        for p, t in tallies.items()
    }


STATES = {"valid": "valid", "invalid": "invalid"}


@hsettings(max_examples=30)
@given(observations)
@example([("a", "product", {"price": "10.5", "qty": -3, "cur": "café", "sku": "SKU-1"})])
@example([("a", "product", {"price": 10.500001, "title": "\u00a0", "cur": 1})])
@example([("b", "listing", {"price": "1e1", "qty": "\u0661\u0660", "cur": True, "sku": ""})])
def test_sql_and_python_agree_on_generated_runs(rows):
    run = make_observations(rows)
    expected_tallies, expected_states = in_python(run)
    verdicts, tallies, python_states = in_sql(run)
    assert flat(tallies) == flat(expected_tallies)

    # Marking: the SQL UPDATE writes the decided rows' verdicts, the very bits the commit
    # would have stored (recovery.verdicts); the undecided ones are the Python states
    # (written by ids in production).
    validation_sql.mark(run.pk, verdicts, None, JUDGED_BY.digest, STATES)
    stored = {
        pk: rest
        for pk, *rest in Observation.objects.filter(run=run).values_list(
            "pk", "validation_state", "verdict", "verdict_rules"
        )
    }
    for pk, (_partition, state, bits) in expected_states.items():
        if pk in python_states:
            assert python_states[pk] == state
            assert stored[pk] == ["pending", None, ""]  # left to the caller
        else:
            assert stored[pk] == [state, bits, JUDGED_BY.digest], (pk, rows)
    # Once written, those rows are no longer stale for these rules: a second pass over the
    # stale rows finds only the undecided ones.
    again = validation_sql.tally(run.pk, verdicts, stale_for=JUDGED_BY.digest)
    assert sum(t.total for t in again.tallies.values()) == 0
    assert {pk for pk, *_ in again.undecided} == set(python_states)


def test_plain_values_are_decided_in_sql():
    """The ordinary case never falls back to Python: text numbers, enum text, empty values."""
    run = make_observations(
        [
            ("a", "product", {"price": "10.5", "qty": "-3", "cur": "EUR", "title": "t"}),
            ("a", "product", {"price": 0, "qty": 7.25, "cur": "", "title": " "}),
            ("b", "listing", {"price": "10.51", "qty": "abc", "cur": "USD"}),
        ]
    )
    pattern_free = [r for r in RULES if r["kind"] != "pattern"]
    verdicts = validation_sql.RowVerdicts(connection.vendor, pattern_free, REQUIRED, WATCHED)
    found = validation_sql.tally(run.pk, verdicts)
    assert found.undecided == []
    a, b = found.tallies["a"], found.tallies["b"]
    assert (a.total, a.complete, a.valid) == (2, 0, 0)  # sku missing on both, title blank
    assert a.fails == {"price_range": 0, "qty_min": 0, "cur_enum": 0}
    assert b.fails == {"price_range": 1, "qty_min": 1, "cur_enum": 1}
    assert (b.complete, b.valid) == (1, 0)
