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
            "reevaluate": [2.0, 2.5, 3.0],
            "rejudge": [6.0, 4.0, 9.0],
            "floor_update": [2.0, 2.0, 9.0],
            "judge": [1.5, 7.0, 3.0],
        },
        judge_us=1500.0,
    )
    assert (got["floor_s"], got["evaluate_s"], got["ratio"]) == (1.0, 4.0, 4.0)
    assert (got["reevaluate_s"], got["ratio_reevaluate"]) == (2.5, 2.5)
    assert (got["rejudge_s"], got["ratio_rejudge"]) == (6.0, 6.0)
    assert (got["floor_update_s"], got["ratio_rejudge_vs_update"]) == (2.0, 3.0)
    assert (got["judge_s"], got["ratio_judge"]) == (3.0, 3.0)
    # The judging moved to the commits: 1,500 us x 1,000 observations = 1.5 s, x1.5 the floor.
    assert (got["commit_judge_s"], got["ratio_commit_judge"]) == (1.5, 1.5)
    assert got["reps"] == 3 and got["observations"] == 1000


@pytest.mark.slow
@pytest.mark.postgres
def test_validation_bench():
    if not on_postgres():
        pytest.skip("the validation bench measures PostgreSQL's jsonb aggregate")
    args = ["--sizes", "400", "--reps", "1", "--pg-name", scratch_name("validation")]
    summary = run_bench("validation.py", *args)
    assert summary["bench"] == "validation"
    (row,) = summary["results"]
    assert row["observations"] == 400 and row["reps"] == 1
    for key in (
        "ratio", "ratio_reevaluate", "ratio_rejudge", "ratio_rejudge_vs_update", "ratio_judge",
        "ratio_commit_judge",
    ):  # fmt: skip
        assert row[key] > 0, key
    assert row["commit_judge_us"] > 0
