"""The drill's row figures read held from the partitions' quarantine (recovery.states.row_states),
so a row judged valid in a quarantined partition counts held, never valid or exportable."""

from __future__ import annotations

import pytest

from recovery.showroom.drill import rows
from tests.support.factories import make_run
from tests.support.held_rows import SHOWN, held_run

pytestmark = pytest.mark.django_db


def test_the_diagnostics_count_a_quarantined_partitions_rows_as_held():
    run = make_run()
    held_run(run)
    diagnostics = rows.candidate_diagnostics(run.pk)
    assert diagnostics["partitions_quarantined"] == ["bad"]
    assert diagnostics["validation_states"] == SHOWN
    assert sorted(map(tuple, diagnostics["validation_by_partition"])) == [
        ("bad", "held", 3),
        ("good", "invalid", 1),
        ("good", "pending", 1),
        ("good", "valid", 2),
    ]


def test_the_quarantine_figures_count_every_row_of_the_quarantined_partition_as_held():
    run = make_run()
    tasks = held_run(run)
    held_keys = rows.held_entity_keys(run.pk, "bad")
    assert held_keys == {t.url for t in tasks["bad"]}
    assert rows.valid_rows(run.pk) == 2
    assert rows.valid_rows(run.pk, "bad") == 0
    assert rows.valid_rows(run.pk, "good") == 2
