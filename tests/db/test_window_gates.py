"""Rules that compare windows (recovery.quality.window_gates): a candidate against its dataset's
previous accepted window, stored like every rule, shown on the run page, failing acceptance.

Windows are built by the acceptance factories (tasks committed one by one, then the run made a
candidate by the engine's own step), so the rows judged are the rows the engine decided.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from recovery.models import Run, ValidationResult
from recovery.quality import acceptance, window_gates
from recovery.states.choices import RunState
from tests.support.acceptance import commit_task, make_shop
from tests.support.factories import make_run, make_tasks
from tests.support.world import make_users

pytestmark = pytest.mark.django_db

GATES = [
    {"name": "catalogue_size", "kind": "entity_count_change", "max_drop": 0.2},
    {"name": "catalogue_kept", "kind": "disappeared_entities", "max_share": 0.1},
    {
        "name": "prices_steady",
        "kind": "value_shift",
        "field": "price",
        "max_change": 0.3,
        "quantile": 0.9,
    },
]


def gated_shop():
    dataset = make_shop()
    dataset.spec["rules"] = [*dataset.spec["rules"], *GATES]
    dataset.save(update_fields=["spec"])
    return dataset


def product(i: int, price: str) -> dict:
    return {"title": f"Item {i}", "price": price, "sku": f"SKU-{i}"}


def price_of(i: int) -> str:
    return f"{10 + i % 7}.50"


def collect(dataset, window: str, rows: dict[str, list[dict]]) -> Run:
    """A run of `window` whose tasks committed these payloads ({partition: [payload]}), made a
    candidate by the engine (which evaluates its rules)."""
    run = make_run(dataset, window=window)
    for partition, payloads in rows.items():
        tasks = make_tasks(run, len(payloads), partition=partition, host=f"{partition}.test")
        for task, payload in zip(tasks, payloads, strict=True):
            commit_task(task, payload)
    assert acceptance.make_candidate(run.pk)
    return run


def catalogue(n: int, *, double: bool = False) -> dict[str, list[dict]]:
    """n products over two shops; prices doubled if asked."""
    rows: dict[str, list[dict]] = {"north": [], "south": []}
    for i in range(1, n + 1):
        price = price_of(i)
        if double:
            price = f"{float(price) * 2:.2f}"
        rows["north" if i % 2 else "south"].append(product(i, price))
    return rows


def first_window(dataset, n: int = 30) -> Run:
    run = collect(dataset, "2026-11-30", catalogue(n))
    acceptance.accept_run(run.pk, "admin")
    return run


def result(run: Run, rule: str, partition: str = "") -> ValidationResult:
    return ValidationResult.objects.get(run=run, rule=rule, partition=partition)


def test_the_first_window_passes_them_with_the_reason_stated():
    dataset = gated_shop()
    run = collect(dataset, "2026-11-30", catalogue(30))
    for gate in GATES:
        res = result(run, gate["name"])
        assert res.passed and res.value is None
        assert res.detail["summary"] == "no previous accepted window"
    acceptance.accept_run(run.pk, "admin")
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.ACCEPTED


def test_a_third_of_the_products_gone_fails_entity_count_change_and_names_the_figures():
    dataset = gated_shop()
    first_window(dataset, 30)
    rows = catalogue(30)
    # Products 21-30 are gone: 20 of 30 (a third) remain.
    kept = {p: [r for r in rs if int(r["sku"][4:]) <= 20] for p, rs in rows.items()}
    run = collect(dataset, "2026-12-01", kept)

    size = result(run, "catalogue_size")
    assert not size.passed
    assert size.value == pytest.approx(1 / 3) and size.threshold == 0.2
    assert size.detail["summary"] == (
        "previous window 2026-11-30: 30 entities; this window: 20 (\u221233%) — max drop 20%"
    )
    assert size.detail["window"] == "2026-11-30"
    gone = result(run, "catalogue_kept")
    assert not gone.passed and gone.value == pytest.approx(1 / 3)
    assert gone.detail["summary"] == (
        "previous window 2026-11-30: 30 entities; 10 of them (33%) are not in this window — max 10%"
    )
    # The prices of the products that remain did not move much: that rule passes.
    assert result(run, "prices_steady").passed
    # Per partition too: products 21-30 were in both shops.
    assert result(run, "catalogue_size", "north").detail["previous"] == 15
    assert result(run, "catalogue_size", "north").detail["entities"] == 10

    with pytest.raises(acceptance.AcceptanceError) as refused:
        acceptance.accept_run(run.pk, "admin")
    message = str(refused.value)
    assert "catalogue_size: previous window 2026-11-30: 30 entities; this window: 20" in message
    assert "catalogue_kept:" in message
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.CANDIDATE


def test_prices_that_all_double_fail_value_shift():
    dataset = gated_shop()
    first_window(dataset, 30)
    run = collect(dataset, "2026-12-01", catalogue(30, double=True))

    shift = result(run, "prices_steady")
    assert not shift.passed
    assert shift.value == pytest.approx(1.0) and shift.threshold == 0.3
    detail = shift.detail
    assert detail["previous_median"] == pytest.approx(13.5)
    assert detail["median"] == pytest.approx(27.0)
    assert detail["median_change"] == pytest.approx(1.0)
    assert detail["quantile_change"] == pytest.approx(1.0)
    assert detail["summary"].startswith(
        "price, previous window 2026-11-30: median 13.50, 90th percentile 16.50 (30 values); "
        "this window: median 27.00 (+100%), 90th percentile 33.00 (+100%) (30 values) "
    )
    assert result(run, "catalogue_size").passed and result(run, "catalogue_kept").passed
    with pytest.raises(acceptance.AcceptanceError, match="prices_steady: price, previous"):
        acceptance.accept_run(run.pk, "admin")


def test_both_pass_with_the_previous_windows_own_data():
    dataset = gated_shop()
    first_window(dataset, 30)
    run = collect(dataset, "2026-12-01", catalogue(30))
    for gate in GATES:
        res = result(run, gate["name"])
        assert res.passed, res.detail
        assert res.value == 0.0
    assert result(run, "catalogue_size").detail["summary"] == (
        "previous window 2026-11-30: 30 entities; this window: 30 (0%) — max drop 20%"
    )
    acceptance.accept_run(run.pk, "admin")
    assert Run.objects.get(pk=run.pk).acceptance_state == RunState.ACCEPTED


def test_it_compares_with_the_window_before_not_a_rejected_one_nor_a_later_one():
    dataset = gated_shop()
    first_window(dataset, 30)
    rejected = collect(dataset, "2026-12-01", catalogue(3))
    acceptance.reject_run(rejected.pk, "admin", "too small")
    later = collect(dataset, "2026-12-05", catalogue(30))
    acceptance.accept_run(later.pk, "admin")
    # A backfilled window between them is compared with the one before it, 2026-11-30.
    backfilled = collect(dataset, "2026-12-02", catalogue(24))
    assert window_gates.previous_window(backfilled).window == "2026-11-30"
    size = result(backfilled, "catalogue_size")
    assert size.passed and size.value == pytest.approx(0.2)  # a drop of exactly max_drop
    assert size.detail["window"] == "2026-11-30"


def test_a_rise_is_judged_only_against_max_rise():
    dataset = gated_shop()
    dataset.spec["rules"][-3] = {
        "name": "catalogue_size",
        "kind": "entity_count_change",
        "max_drop": 0.2,
        "max_rise": 0.5,
    }
    dataset.save(update_fields=["spec"])
    first_window(dataset, 20)
    run = collect(dataset, "2026-12-01", catalogue(40))
    size = result(run, "catalogue_size")
    assert not size.passed and size.value == pytest.approx(1.0) and size.threshold == 0.5
    assert size.detail["summary"].endswith("(+100%) — max drop 20%, max rise 50%")


def test_the_run_page_shows_the_previous_windows_figure_beside_this_one():
    dataset = gated_shop()
    first_window(dataset, 30)
    rows = catalogue(30)
    run = collect(dataset, "2026-12-01", {p: rs[:10] for p, rs in rows.items()})
    client = Client()
    client.force_login(make_users()["admin"])
    page = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert (
        "previous window 2026-11-30: 30 entities; this window: 20 (\u221233%) — max drop 20%"
        in (page)
    )
    assert "Cannot accept: catalogue_size: previous window 2026-11-30" in page


def test_a_rerun_by_a_window_rule_selects_the_partitions_that_lost_entities():
    from recovery.quality import reruns

    dataset = gated_shop()
    first_window(dataset, 30)
    rows = catalogue(30)
    rows["south"] = rows["south"][:5]  # south lost 10 of 15
    run = collect(dataset, "2026-12-01", rows)
    assert not result(run, "catalogue_kept", "south").passed
    assert result(run, "catalogue_kept", "north").passed
    preview = reruns.preview_recovery_batch(run.pk, rules=["catalogue_kept"])
    assert preview.by_partition == {"south": 5}
