"""Early (provisional) quarantine while a run collects (recovery.quality.provisional)."""

from __future__ import annotations

import pytest

from recovery.models import AuditEntry, Observation, RunPartition
from recovery.quality import acceptance, provisional, validation
from recovery.states.choices import RunState
from tests.support.acceptance import bad_payload, commit_task, good_payload, make_shop
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("invalid", "n", "expected"),
    [
        (0, 0, 0.0),
        (0, 50, 0.0),
        (30, 30, 0.9173),  # 1 / (1 + z²/n)
        (5, 100, 0.0245),
        (50, 100, 0.4188),
    ],
)
def test_the_wilson_lower_bound(invalid, n, expected):
    assert provisional.wilson_lower_bound(invalid, n) == pytest.approx(expected, abs=1e-4)


def collecting_run(per_partition: int):
    run = make_run(make_shop())
    tasks = {
        p: make_tasks(run, per_partition, partition=p, host=f"{p}.test") for p in ("good", "bad")
    }
    return run, tasks


def commit(tasks, quality: str, n: int, start: int = 0) -> None:
    for task in tasks[start : start + n]:
        commit_task(task, good_payload(task) if quality == "good" else bad_payload(task))


def test_it_flags_a_bad_partition_only_on_a_sufficient_sample():
    run, tasks = collecting_run(60)
    commit(tasks["bad"], "bad", provisional.MIN_SAMPLE - 1)
    commit(tasks["good"], "good", 40)
    assert provisional.check_run(run.pk) == []  # 29 invalid of 29: too small a sample
    bad = RunPartition.objects.get(run=run, name="bad")
    assert bad.sample_size == provisional.MIN_SAMPLE - 1
    assert bad.sample_invalid == {"partition_invalid_prices": provisional.MIN_SAMPLE - 1}
    assert bad.provisional_at is None

    commit(tasks["bad"], "bad", 1, start=provisional.MIN_SAMPLE - 1)
    assert provisional.check_run(run.pk) == ["bad"]
    bad.refresh_from_db()
    assert bad.sample_size == provisional.MIN_SAMPLE  # only the new observation was read
    assert bad.provisional_at is not None
    assert "partition_invalid_prices" in bad.provisional_reason
    assert "30 of the first 30" in bad.provisional_reason
    good = RunPartition.objects.get(run=run, name="good")
    assert good.provisional_at is None and good.sample_invalid == {}
    # A warning, not a decision: nothing is held, nothing is quarantined, the run collects.
    assert not bad.quarantined
    assert set(Observation.objects.filter(run=run).values_list("validation_state", flat=True)) == {
        "pending"
    }
    run.refresh_from_db()
    assert run.acceptance_state == RunState.COLLECTING
    assert [r.name for r in provisional.shown_flags(run)] == ["bad"]
    assert AuditEntry.objects.filter(action="provisional_quarantine").count() == 1
    assert provisional.check_run(run.pk) == []  # flagged once


def test_a_share_near_the_threshold_is_not_flagged():
    # 2 invalid of 60 (3.3%) under max 5%: the lower bound is far below, no flag.
    run, tasks = collecting_run(60)
    commit(tasks["bad"], "good", 58)
    commit(tasks["bad"], "bad", 2, start=58)
    assert provisional.check_run(run.pk) == []
    row = RunPartition.objects.get(run=run, name="bad")
    assert row.sample_size == 60 and row.sample_invalid == {"partition_invalid_prices": 2}


def test_the_final_decision_is_made_at_candidate_time_and_supersedes_the_flag():
    run, tasks = collecting_run(40)
    commit(tasks["bad"], "bad", 40)
    commit(tasks["good"], "good", 40)
    assert provisional.check_run(run.pk) == ["bad"]
    assert acceptance.make_candidate(run.pk)
    run.refresh_from_db()
    bad = RunPartition.objects.get(run=run, name="bad")
    assert bad.quarantined and bad.quarantine_reason.startswith(validation.RULE_REASON_PREFIX)
    assert provisional.shown_flags(run) == []  # the candidate's decision is shown instead
    assert provisional.check_run(run.pk) == []  # a candidate is not sampled


def test_the_acceptance_step_samples_collecting_runs_and_the_dispatcher_sees_it_due():
    run, tasks = collecting_run(40)
    commit(tasks["bad"], "bad", 35)
    assert provisional.due()
    provisional._last_check["at"] = 0.0
    acceptance.advance_runs()  # the step workers and the acceptance task run
    assert RunPartition.objects.get(run=run, name="bad").provisional_at is not None


def test_the_run_and_quarantine_pages_show_the_flag_while_collecting(client):
    from tests.support.world import PASSWORD, make_users

    make_users()
    run, tasks = collecting_run(40)
    commit(tasks["bad"], "bad", 35)
    commit(tasks["good"], "good", 35)
    assert client.login(username="olivia", password=PASSWORD)  # an operator
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/quarantine/"):
        assert 'data-partition="bad"' not in client.get(url).content.decode()
    provisional.check_run(run.pk)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/quarantine/"):
        page = client.get(url).content.decode()
        assert '<tr class="provisional" data-partition="bad">' in page, url
        assert 'data-partition="good"' not in page.split('id="provisional-partitions"')[1][:2000]
    commit(tasks["bad"], "bad", 5, start=35)
    commit(tasks["good"], "good", 5, start=35)
    assert acceptance.make_candidate(run.pk)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="provisional"' not in page  # superseded by the candidate's decision
