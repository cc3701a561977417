"""An observation's validation state as the product shows it (counts, exports, selections).

A row stores its own verdict (`Observation.validation_state`): `valid` or `invalid`, judged
against the run's rules when the row was committed (recovery.verdicts) or by the last
evaluation, or `pending` when nobody has judged it yet. Whether it is **held** is not stored
on the row: a row is held exactly when its partition is quarantined
(`RunPartition.quarantined`), whatever its verdict. One source of truth for holds means a
quarantine or a release changes no observation row, and a row committed into a quarantined
partition is held from its first moment (guarantee 6: held and invalid rows are never
exported or published).
"""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import connection
from django.db.models import Count, F, Lookup, Q, QuerySet

from recovery.models import Observation, RunPartition

VALID = Observation.Validation.VALID
INVALID = Observation.Validation.INVALID
HELD = Observation.Validation.HELD


class _Name(TypedDict):
    name: str


def held_partitions(run_id: int) -> QuerySet[RunPartition, _Name]:
    """The names of the run's quarantined partitions (a subquery)."""
    return RunPartition.objects.filter(run_id=run_id, quarantined=True).values("name")


def state_counts(run_id: int) -> dict[str, int]:
    """{state: observations} of one run, held derived from the partitions; states with no
    rows are left out. Two grouped reads: every row by its stored verdict (an index-only
    scan of obs_run_valid_idx) and the rows of quarantined partitions (obs_run_partition_idx),
    which are moved from their verdict to `held`."""
    stored = _by_state(Observation.objects.filter(run_id=run_id))
    held = _by_state(
        Observation.objects.filter(run_id=run_id, partition__in=held_partitions(run_id))
    )
    counts = {state: n - held.get(state, 0) for state, n in stored.items()}
    counts[HELD] = counts.get(HELD, 0) + sum(held.values())
    return {state: n for state, n in counts.items() if n}


def not_valid(run_id: int) -> Q:
    """The rows that are not valid as shown: an invalid or unjudged verdict, or held."""
    return ~Q(validation_state=VALID) | Q(partition__in=held_partitions(run_id))


def exportable(run_id: int) -> QuerySet[Observation]:
    """The rows an export or a publication may carry: valid and not held."""
    return _valid_unheld(Q(run_id=run_id), run_id)


def exportable_by_id(run_id: int) -> QuerySet[Observation]:
    """exportable(run_id) in id order, read through obs_run_valid_idx (run, validation_state,
    id) from the first row of the run or the keyset cursor on.

    On PostgreSQL the run is named `run_id = ANY(ARRAY[run])`, not `run_id = run`. With the
    equality the planner takes run_id for a constant, sees that the primary key gives id order
    as well, and when the run holds most of the table it walks the primary key from the first
    id, reading every earlier run's rows before this run's: bench/api.py (2026-12-07) measured
    the first rows page of a 2,000,000-row run reading the 100,000 rows of another dataset's
    run first (98 ms; 3 ms through the index). Through ANY, run_id stays a sort key that only
    the run-led index provides."""
    if connection.vendor != "postgresql":
        return exportable(run_id).order_by("pk")
    return _valid_unheld(_AnyOf(F("run_id"), [run_id]), run_id).order_by("run_id", "pk")


def _valid_unheld(run: Q | Lookup, run_id: int) -> QuerySet[Observation]:
    return Observation.objects.filter(run, validation_state=VALID).exclude(
        partition__in=held_partitions(run_id)
    )


class _AnyOf(Lookup):
    """`column = ANY(%s)` with a list bound as one array (PostgreSQL), used as a filter."""

    lookup_name = "any_of"
    prepare_rhs = False

    def as_sql(self, compiler: Any, backend: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params = self.process_lhs(compiler, backend)
        return f"{lhs} = ANY(%s)", (*params, list(self.rhs))


def shown_state(observation: Observation, held: set[str]) -> str:
    """One row's state as shown, given its run's quarantined partition names."""
    return HELD if observation.partition in held else observation.validation_state


def _by_state(rows: QuerySet[Observation]) -> dict[str, int]:
    return dict(
        rows.order_by()
        .values_list("validation_state")
        .annotate(n=Count("pk"))
        .values_list("validation_state", "n")
    )
