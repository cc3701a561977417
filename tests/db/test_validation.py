"""Validation rules (docs/spec-format.md [[rules]]): per run and per partition."""

from __future__ import annotations

import pytest

from recovery.models import Observation, RunPartition, Task, ValidationResult
from recovery.quality import validation
from recovery.states import row_states
from tests.support.acceptance import commit_task, good_payload, make_collected_run, make_shop
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def result(run, rule, partition=""):
    return ValidationResult.objects.get(run=run, rule=rule, partition=partition)


def test_it_stores_every_rule_per_run_and_per_partition():
    run = make_collected_run({"a": "good", "b": "good"}, per_partition=4)
    outcome = validation.evaluate(run.pk)
    assert outcome.passed and outcome.failures == []
    rules = {r["name"] for r in run.dataset.spec["rules"]}
    for rule in rules:
        for partition in ("", "a", "b"):
            assert result(run, rule, partition).passed, (rule, partition)
    assert result(run, "coverage").value == 1.0
    assert set(RunPartition.objects.filter(run=run).values_list("name", flat=True)) == {"a", "b"}


def test_a_partition_over_the_share_is_held_and_released_after_repair():
    run = make_collected_run({"a": "good", "b": "bad"}, per_partition=10)
    outcome = validation.evaluate(run.pk)
    assert outcome.quarantined == ["b"]
    assert result(run, "partition_invalid_prices", "b").value == 1.0
    assert not result(run, "partition_invalid_prices", "b").passed
    assert result(run, "partition_invalid_prices", "a").passed
    assert not result(run, "coverage").passed  # 10 valid of 20 tasks
    # b's rows are held by their partition's quarantine; each keeps its own verdict.
    assert outcome.counts == {"valid": 10, "held": 10}
    assert set(
        Observation.objects.filter(run=run, partition="b").values_list(
            "validation_state", flat=True
        )
    ) == {"invalid"}
    # The repaired values arrive (pending), only partition b is re-marked.
    for obs in Observation.objects.filter(run=run, partition="b"):
        Observation.objects.filter(pk=obs.pk).update(
            payload={**obs.payload, "price": "3.00"}, validation_state="pending"
        )
    outcome = validation.evaluate(run.pk, mark={"b"})
    assert outcome.released == ["b"] and outcome.passed
    assert not RunPartition.objects.get(run=run, name="b").quarantined


def test_an_operators_quarantine_is_not_lifted_by_the_rules():
    run = make_collected_run({"a": "good"}, per_partition=3)
    RunPartition.objects.create(run=run, name="a", quarantined=True, quarantine_reason="looks off")
    validation.evaluate(run.pk)
    part = RunPartition.objects.get(run=run, name="a")
    assert part.quarantined and part.quarantine_reason == "looks off"
    assert row_states.state_counts(run.pk) == {"held": 3}


def test_a_value_rule_without_a_partition_rule_tolerates_nothing():
    run = make_collected_run({"a": "good"}, per_partition=20)
    odd = Observation.objects.filter(run=run).first()
    Observation.objects.filter(pk=odd.pk).update(payload={**odd.payload, "sku": "nope"})
    outcome = validation.evaluate(run.pk)
    assert not outcome.passed
    assert any(f.startswith("sku_pattern") for f in outcome.failures)
    assert Observation.objects.get(pk=odd.pk).validation_state == "invalid"


def test_an_enumeration_rule_marks_values_outside_the_list_invalid():
    run = make_collected_run({"a": "good"}, per_partition=6)
    dataset = run.dataset
    dataset.spec["page_types"]["product"]["fields"]["stock"] = {"selector": ".stock"}
    dataset.spec["rules"].append(
        {"name": "stock_values", "kind": "enum", "field": "stock", "values": ["in", "out", 0]}
    )
    dataset.save(update_fields=["spec"])
    odd, zero, *rest = Observation.objects.filter(run=run).order_by("pk")
    Observation.objects.filter(pk=odd.pk).update(payload={**odd.payload, "stock": "maybe"})
    Observation.objects.filter(pk=zero.pk).update(payload={**zero.payload, "stock": "0"})
    for obs in rest:
        Observation.objects.filter(pk=obs.pk).update(payload={**obs.payload, "stock": "in"})
    outcome = validation.evaluate(run.pk)
    assert not outcome.passed
    assert any(f.startswith("stock_values") for f in outcome.failures)
    assert Observation.objects.get(pk=odd.pk).validation_state == "invalid"
    assert Observation.objects.get(pk=zero.pk).validation_state == "valid"  # 0 listed as a number
    assert {Observation.objects.get(pk=o.pk).validation_state for o in rest} == {"valid"}
    assert not result(run, "stock_values").passed
    assert result(run, "stock_values").detail == {"invalid": 1}


def test_required_and_outcome_ratio_rules():
    dataset = make_shop(
        spec={
            "rules": [
                {"name": "complete", "kind": "required", "min": 0.9},
                {"name": "pages", "kind": "outcome_ratio", "outcome": "committed", "min": 0.9},
            ]
        }
    )
    run = make_run(dataset)
    tasks = make_tasks(run, 8, partition="a", host="a.test")
    for i, task in enumerate(tasks):
        payload = good_payload(task)
        if i < 2:
            payload["title"] = ""
        commit_task(task, payload)
    make_tasks(run, 2, partition="a", host="a2.test", state="quarantined")
    outcome = validation.evaluate(run.pk)
    assert result(run, "complete").value == pytest.approx(6 / 8)
    assert result(run, "pages").value == pytest.approx(8 / 10)
    assert sorted(f.split(":")[0] for f in outcome.failures) == ["complete", "pages"]
    # A quality failure never changes a task's state.
    assert sorted(Task.objects.filter(run=run).values_list("state", flat=True)) == (
        ["committed"] * 8 + ["quarantined"] * 2
    )


def test_a_rule_removed_from_the_spec_stops_judging_the_run():
    run = make_collected_run({"a": "good"}, per_partition=4)
    Observation.objects.filter(run=run).update(payload={"title": "x", "price": "1", "sku": "bad"})
    assert not validation.evaluate(run.pk).passed
    dataset = run.dataset
    dataset.spec["rules"] = [r for r in dataset.spec["rules"] if r["name"] != "sku_pattern"]
    dataset.save(update_fields=["spec"])
    assert validation.evaluate(run.pk).passed
    assert not ValidationResult.objects.filter(run=run, rule="sku_pattern").exists()


def test_a_value_exactly_at_a_range_rules_min_and_max_is_valid():
    """The boundaries are inclusive: min and max pass, a hair outside either fails."""
    run = make_collected_run({"a": "good"}, per_partition=6)
    dataset = run.dataset
    dataset.spec["page_types"]["product"]["fields"]["weight"] = {"selector": ".weight"}
    dataset.spec["rules"].append(
        {"name": "weight_range", "kind": "range", "field": "weight", "min": 10, "max": 20.5}
    )
    dataset.save(update_fields=["spec"])
    weights = ["10", "20.5", 10, "9.99", "20.51", "15"]
    observations = list(Observation.objects.filter(run=run).order_by("pk"))
    for obs, weight in zip(observations, weights, strict=True):
        Observation.objects.filter(pk=obs.pk).update(payload={**obs.payload, "weight": weight})
    validation.evaluate(run.pk)
    states = [Observation.objects.get(pk=o.pk).validation_state for o in observations]
    assert states == ["valid", "valid", "valid", "invalid", "invalid", "valid"]
    assert result(run, "weight_range").detail == {"invalid": 2}
