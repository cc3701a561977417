"""Corrections: a repaired value of a published run is a new version, never an overwrite."""

from __future__ import annotations

import pytest

from recovery.delivery import exports
from recovery.models import Observation, ObservationVersion, OutboxEvent, RunPartition
from recovery.quality import acceptance, reruns
from recovery.states.choices import RunState
from tests.support.acceptance import commit_claimed, lenient_shop
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def scraped(price_for_b: str):
    def payload(c):
        price = price_for_b if c.partition == "b" else "9.99"
        return {"title": f"Item {c.task_id}", "price": price, "sku": f"SKU-{c.task_id}"}

    return payload


def test_a_repair_of_a_published_run_supersedes_with_history_and_an_event(settings):
    settings.SALVAGE_OUTBOX_WAKE = False
    run = make_run(lenient_shop())
    make_tasks(run, 10, partition="a", host="a.test")
    make_tasks(run, 10, partition="b", host="b.test")
    commit_claimed("w1", scraped("5.00"))
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    before = {o.observation_key: o for o in Observation.objects.filter(run=run)}

    batch = reruns.create_recovery_batch(
        run.pk, partitions=["b"], reason="price was VAT-exclusive", scraper_version="2", actor="a"
    )
    run.refresh_from_db()
    assert run.acceptance_state == RunState.PUBLISHED  # stays available while repaired
    commit_claimed("w2", scraped("6.00"))
    acceptance.advance_runs()
    batch.refresh_from_db()
    assert batch.state == "completed"

    after = {o.observation_key: o for o in Observation.objects.filter(run=run)}
    assert set(after) == set(before)  # same identities, no new rows
    changed = [k for k in after if after[k].partition == "b"]
    assert len(changed) == 10
    for key in changed:
        obs = after[key]
        assert obs.version == 2 and obs.payload["price"] == "6.00"
        old = ObservationVersion.objects.get(observation=obs)
        assert old.version == 1 and old.payload["price"] == "5.00"
        assert old.payload_hash == before[key].payload_hash
        assert obs.validation_state == "valid"
    for key in after.keys() - set(changed):
        assert after[key].version == 1 and after[key].updated_at == before[key].updated_at
    events = OutboxEvent.objects.filter(run=run, event_type="correction")
    assert events.count() == 10
    assert {e.payload["version"] for e in events} == {2}
    rows = "".join(exports.stream(run.pk, "csv"))
    assert rows.count("6.00") == 10 and "5.00" not in rows


def test_the_same_value_again_is_not_a_correction(settings):
    settings.SALVAGE_OUTBOX_WAKE = False
    run = make_run(lenient_shop())
    make_tasks(run, 4, partition="b", host="b.test")
    commit_claimed("w1", scraped("5.00"))
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    reruns.create_recovery_batch(
        run.pk, partitions=["b"], reason="check", scraper_version="2", actor="a"
    )
    commit_claimed("w2", scraped("5.00"))
    assert not ObservationVersion.objects.exists()
    assert not OutboxEvent.objects.filter(event_type="correction").exists()
    assert not RunPartition.objects.filter(run=run, quarantined=True).exists()


def test_an_accepted_run_keeps_exporting_while_its_repair_runs(settings):
    settings.SALVAGE_OUTBOX_WAKE = False
    run = make_run(lenient_shop())
    make_tasks(run, 5, partition="b", host="b.test")
    commit_claimed("w1", scraped("5.00"))
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    reruns.create_recovery_batch(
        run.pk, partitions=["b"], reason="price fix", scraper_version="2", actor="a"
    )
    commit_claimed("w2", scraped("6.00"))
    # The batch has not completed yet: every row is still exported, now as version 2.
    rows = "".join(exports.stream(run.pk, "csv"))
    assert rows.count("6.00") == 5
    assert ObservationVersion.objects.filter(observation__run=run).count() == 5
