"""bench/validation.py: its ratios' definition, and a run end to end at a tiny size."""

from __future__ import annotations

import pytest

from tests.bench_smoke.test_benches import bench_module, on_postgres, run_bench, scratch_name


def test_validation_ratios_are_the_products_seconds_over_the_floors_median_seconds():
    summarise = bench_module("validation").summarise
    got = summarise(
        1000,
        {
            "floor": [0.5, 1.5, 1.0],
            "evaluate": [4.0, 3.0, 8.0],
            "floor_update": [2.0, 2.0, 9.0],
            "reevaluate": [2.0, 2.5, 3.0],
            "judge": [1.5, 7.0, 3.0],
        },
    )
    assert (got["floor_s"], got["evaluate_s"], got["ratio"]) == (1.0, 4.0, 4.0)
    assert (got["floor_update_s"], got["ratio_vs_update"]) == (2.0, 2.0)
    assert (got["reevaluate_s"], got["ratio_reevaluate"]) == (2.5, 2.5)
    assert (got["judge_s"], got["ratio_judge"]) == (3.0, 3.0)
    assert got["reps"] == 3 and got["observations"] == 1000


@pytest.mark.slow
@pytest.mark.postgres
def test_validation_bench():
    if not on_postgres():
        pytest.skip("the validation bench measures PostgreSQL's jsonb aggregate")
    args = ["--sizes", "400", "--reps", "1", "--pg-name", scratch_name("validation")]
    args += ["--hot-fillfactor", "50"]
    summary = run_bench("validation.py", *args)
    assert summary["bench"] == "validation"
    (row,) = summary["results"]
    assert row["observations"] == 400 and row["reps"] == 1
    for key in ("ratio", "ratio_vs_update", "ratio_reevaluate", "ratio_judge"):
        assert row[key] > 0, key
    (hot,) = summary["hot"]
    assert hot["observations"] == 400 and hot["fillfactor"] == 50
    assert hot["updates"] >= 400 and hot["ratio"] > 0
    # The lever's premise: with validation_state in no index and room on the pages, marking
    # is a HOT update (most rows; a page may run out of room).
    assert hot["hot_updates"] > hot["updates"] / 2
