"""Verdicts judged at commit (recovery.verdicts) and what an evaluation does with them.

Every observation here is written by the engine's own commit (leases.claim + commit_outcomes,
the path a worker runs), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import pytest

from recovery import leases, verdicts
from recovery.models import Observation, RunPartition, ValidationResult
from recovery.outcomes import Observed, Outcome
from recovery.quality import validation, validation_sql
from recovery.states import row_states
from tests.support.acceptance import make_shop
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db

GOOD = {"title": "Item", "price": "12.50", "sku": "SKU-1"}
BAD_PRICE = {"title": "Item", "price": "0.00", "sku": "SKU-2"}
NO_TITLE = {"title": " ", "price": "3", "sku": "SKU-3"}
ODD_SKU = {"title": "Item", "price": "3", "sku": "nope"}


def commit(run, partition: str, payloads: list[dict]) -> None:
    """Tasks of one partition, claimed and committed by the engine, one payload each."""
    make_tasks(run, len(payloads), partition=partition, host=f"{partition}.test")
    claimed = leases.claim("w1", len(payloads))
    assert len(claimed) == len(payloads)
    outcomes = [
        Outcome(http_status=200, observations=[Observed(f"{c.url}#{i}", payload)])
        for i, (c, payload) in enumerate(zip(claimed, payloads, strict=True))
    ]
    assert leases.commit_outcomes("w1", claimed, outcomes).states == {"committed": len(claimed)}


def results(run) -> dict:
    return {
        (r.rule, r.partition): (r.passed, r.value, r.detail)
        for r in ValidationResult.objects.filter(run=run)
    }


def test_it_judges_each_observation_when_the_commit_writes_it():
    dataset = make_shop()
    run = make_run(dataset)
    commit(run, "a", [GOOD, BAD_PRICE, NO_TITLE, ODD_SKU])
    rules = verdicts.Rules.of(dataset.spec)
    rows = {
        o.payload["sku"]: (o.validation_state, o.verdict, o.verdict_rules)
        for o in Observation.objects.filter(run=run)
    }
    assert rows == {
        p["sku"]: (
            rules.state(rules.verdict(p, "product")),
            rules.verdict(p, "product"),
            rules.digest,
        )
        for p in (GOOD, BAD_PRICE, NO_TITLE, ODD_SKU)
    }
    assert {sku: state for sku, (state, _, _) in rows.items()} == {
        "SKU-1": "valid",
        "SKU-2": "invalid",
        "SKU-3": "invalid",
        "nope": "invalid",
    }
    # Nothing is left for an evaluation to judge.
    assert validation_sql.stored(run.pk, rules.digest).stale == {}


def test_an_evaluation_of_stored_verdicts_equals_judging_every_row_again():
    run = make_run(make_shop())
    commit(run, "a", [GOOD] * 20 + [BAD_PRICE])  # 4.8% invalid prices: within 5%
    commit(run, "b", [GOOD, BAD_PRICE, BAD_PRICE, NO_TITLE])
    commit(run, "c", [GOOD, ODD_SKU, GOOD])
    from_commit = validation.evaluate(run.pk)
    stored_results = results(run)
    stored_states = dict(Observation.objects.filter(run=run).values_list("pk", "validation_state"))

    # Forget every verdict: the evaluation judges every payload (the SQL pass and Python).
    Observation.objects.filter(run=run).update(verdict=None, verdict_rules="")
    again = validation.evaluate(run.pk)
    assert (again.passed, again.failures, again.counts) == (
        from_commit.passed,
        from_commit.failures,
        from_commit.counts,
    )
    assert results(run) == stored_results
    assert (
        dict(Observation.objects.filter(run=run).values_list("pk", "validation_state"))
        == stored_states
    )
    assert from_commit.quarantined == ["b"] and from_commit.counts["held"] == 4


def test_rows_judged_by_older_rules_are_judged_again():
    dataset = make_shop()
    run = make_run(dataset)
    commit(run, "a", [GOOD, {**GOOD, "sku": "SKU-9", "price": "5"}])
    old_digest = verdicts.Rules.of(dataset.spec).digest
    # loaddataset tightens the price rule: 5 is now too cheap.
    next(r for r in dataset.spec["rules"] if r["name"] == "price_positive")["min"] = 10
    dataset.save(update_fields=["spec"])
    new_rules = verdicts.Rules.of(dataset.spec)
    assert new_rules.digest != old_digest
    assert sum(validation_sql.stored(run.pk, new_rules.digest).stale.values()) == 2

    outcome = validation.evaluate(run.pk)
    rows = dict(Observation.objects.filter(run=run).values_list("payload__sku", "validation_state"))
    assert rows == {"SKU-1": "valid", "SKU-9": "invalid"}
    assert set(Observation.objects.filter(run=run).values_list("verdict_rules", flat=True)) == {
        new_rules.digest
    }
    assert outcome.counts == {"held": 2}  # 1 of 2 prices invalid: all of a is held


def test_a_partition_whose_rows_changed_is_decided_again_and_an_untouched_one_is_not():
    run = make_run(make_shop())
    commit(run, "a", [GOOD] * 10)
    commit(run, "b", [GOOD] * 10)
    commit(run, "c", [BAD_PRICE] * 10)
    first = validation.evaluate(run.pk)
    assert first.quarantined == ["c"]
    fingerprints = {
        p.name: (p.marked_rows, p.marked_sum) for p in RunPartition.objects.filter(run=run)
    }
    assert fingerprints["a"][0] == 10 and None not in fingerprints["a"]

    # New bad rows reach b (as a recovery batch's discovered pages would); c is left alone.
    commit(run, "b", [BAD_PRICE] * 5)
    # Re-marking nothing by name: only the partition whose rows changed is decided again.
    again = validation.evaluate(run.pk, mark=set())
    assert again.quarantined == ["b"]
    assert RunPartition.objects.get(run=run, name="c").quarantined  # still held, not re-marked
    assert row_states.state_counts(run.pk) == {"valid": 10, "held": 25}
    # Nothing changed since: a third evaluation decides nothing again.
    assert validation.evaluate(run.pk, mark=set()).quarantined == []


def test_a_row_committed_into_a_quarantined_partition_is_held_at_once():
    run = make_run(make_shop())
    RunPartition.objects.create(run=run, name="a", quarantined=True, quarantine_reason="manual")
    commit(run, "a", [GOOD, GOOD])
    assert set(Observation.objects.filter(run=run).values_list("validation_state", flat=True)) == {
        "valid"
    }
    assert row_states.state_counts(run.pk) == {"held": 2}
    assert not row_states.exportable(run.pk).exists()


def test_rules_too_many_for_the_bits_leave_rows_to_the_evaluation():
    dataset = make_shop()
    extra = [
        {"name": f"r{i}", "kind": "range", "field": "price", "min": 0}
        for i in range(verdicts.MAX_BITS)
    ]
    dataset.spec["rules"] += extra
    dataset.save(update_fields=["spec"])
    assert not verdicts.Rules.of(dataset.spec).judged_at_commit
    run = make_run(dataset)
    commit(run, "a", [GOOD, BAD_PRICE])
    assert set(Observation.objects.filter(run=run).values_list("validation_state", flat=True)) == {
        "pending"
    }
    validation.evaluate(run.pk)
    rows = dict(Observation.objects.filter(run=run).values_list("payload__sku", "validation_state"))
    assert rows == {"SKU-1": "valid", "SKU-2": "invalid"}
