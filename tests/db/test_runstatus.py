"""manage.py runstatus: counts by state, coverage from tasks (never attempts), acceptance."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from recovery import keys
from recovery.models import Attempt, Observation, RemoteJob, Run
from recovery.quality import status
from recovery.states import task as task_states
from recovery.states.choices import TaskState
from tests.support.factories import force_state, make_run, make_tasks
from tests.support.held_rows import SHOWN, held_run

pytestmark = pytest.mark.django_db


def runstatus(*args: str) -> str:
    out = io.StringIO()
    call_command("runstatus", *args, stdout=out)
    return out.getvalue()


def commit(task, *, attempts: int = 1, observe: bool = True) -> None:
    """Lease and commit one task the way a worker would, with `attempts` attempts."""
    for n in range(attempts):
        Attempt.objects.create(task=task, run_id=task.run_id, outcome="retry", lease_token=n)
    force_state(task, TaskState.LEASED, lease_owner="w")
    force_state(task, TaskState.COMMITTED, lease_owner="")
    if observe:
        run = Run.objects.select_related("dataset").get(pk=task.run_id)
        Observation.objects.create(
            run=run,
            observation_key=keys.observation_key(run.dataset.name, task.url, run.window),
            entity_key=task.url,
            window=run.window,
            payload={},
            payload_hash="h",
            source_task=task,
        )


def test_it_reports_counts_coverage_and_acceptance_as_json():
    run = make_run()
    tasks = make_tasks(run, 4, partition="a")
    make_tasks(run, 1, partition="b", state=TaskState.DEAD)
    # Ten attempts of one task are still one committed task and one observation.
    commit(tasks[0], attempts=10)
    commit(tasks[1])
    # One task is held by a provider job: counted as remote, neither pending nor leased.
    submission = Attempt.objects.create(task=tasks[2], run=run, outcome="submitted")
    job = RemoteJob.objects.create(attempt=submission, run=run, provider="messora", kind="batch")
    assert task_states.hand_to_job(job, [tasks[2].pk], sources=[TaskState.PENDING])
    data = json.loads(runstatus(str(run.pk), "--json"))
    assert data["run"] == run.pk
    assert data["dataset"] == run.dataset.name
    assert data["window"] == run.window
    assert data["acceptance_state"] == "collecting"
    assert data["tasks"] == {
        "pending": 1,
        "leased": 0,
        "retry_wait": 0,
        "remote": 1,
        "committed": 2,
        "quarantined": 0,
        "gone": 0,
        "dead": 1,
    }
    assert data["task_total"] == 5
    assert data["terminal"] == 3
    assert data["observations"] == 2
    assert data["coverage"] == pytest.approx(2 / 5)
    assert data["credits_used"] == 0
    assert data["coverage_note"] == ""


def test_it_finds_a_run_by_dataset_and_window():
    run = make_run(window="2026-11-29")
    make_tasks(run, 2)
    data = json.loads(runstatus(f"{run.dataset.name}@2026-11-29", "--json"))
    assert data["run"] == run.pk
    assert data["tasks"]["pending"] == 2


def test_it_counts_from_the_counters_not_the_task_table():
    run = make_run()
    make_tasks(run, 50)
    with CaptureQueriesContext(connection) as queries:
        status.run_status(run)
    # The task times (recovery.leases.sizing) join at most SAMPLE recent attempts' own tasks
    # by primary key for their page type: bounded, never a count over the task table.
    queries = [q for q in queries if 'FROM "recovery_attempt"' not in q["sql"]]
    assert not [q["sql"] for q in queries if 'recovery_task"' in q["sql"].replace(" ", "")]
    assert not [q for q in queries if 'FROM "recovery_task"' in q["sql"]]


def test_coverage_is_unknown_for_a_run_without_tasks():
    run = make_run()
    data = json.loads(runstatus(str(run.pk), "--json"))
    assert data["coverage"] is None
    assert "committed coverage n/a" in runstatus(str(run.pk))


def test_it_sums_remote_job_credits_and_shows_the_coverage_note():
    run = make_run(coverage_note="search job stopped on token_cap")
    tasks = make_tasks(run, 2)
    for task, credits in zip(tasks, (3, 4), strict=True):
        attempt = Attempt.objects.create(task=task, run=run, outcome="submitted")
        RemoteJob.objects.create(
            attempt=attempt, run=run, provider="messora", kind="search", credits_used=credits
        )
    data = json.loads(runstatus(str(run.pk), "--json"))
    assert data["credits_used"] == 7
    assert data["coverage_note"] == "search job stopped on token_cap"
    text = runstatus(str(run.pk))
    assert "credits used 7" in text
    assert "note: search job stopped on token_cap" in text


def test_the_text_report_is_short_and_readable():
    run = make_run(acceptance_state="candidate", state_reason="every task is terminal")
    tasks = make_tasks(run, 2)
    commit(tasks[0])
    text = runstatus(str(run.pk))
    assert text.splitlines()[0] == (
        f"run {run.pk} {run.dataset.name}@{run.window}: candidate (every task is terminal)"
    )
    assert "tasks 2 (pending 1, committed 1)" in text
    assert "committed coverage 50.0%" in text


@pytest.mark.parametrize("ref", ["999999", "nosuch@w", "not a run", "@", ""])
def test_an_unknown_run_exits_2(ref):
    make_run()
    with pytest.raises(CommandError) as err:
        runstatus(ref)
    assert err.value.returncode == 2
    assert "RUN" in str(err.value)


def test_it_names_both_coverages_and_reports_the_rule_accept_judges():
    from recovery.quality import validation
    from tests.support.acceptance import make_collected_run

    run = make_collected_run({"a": "good", "b": "bad"}, per_partition=5)
    make_tasks(run, 10, partition="c")  # pending: committed coverage 10 / 20
    assert json.loads(runstatus(str(run.pk), "--json"))["acceptance_coverage"] is None
    assert "acceptance coverage" not in runstatus(str(run.pk))
    validation.evaluate(run.pk)
    data = json.loads(runstatus(str(run.pk), "--json"))
    assert data["coverage"] == pytest.approx(0.5)
    check = data["acceptance_coverage"]
    assert check["rule"] == "coverage" and check["threshold"] == pytest.approx(0.9)
    assert check["passed"] is False and check["value"] < 0.9
    text = runstatus(str(run.pk))
    assert "committed coverage 50.0% (committed tasks / logical tasks)" in text
    assert f"acceptance coverage: coverage {check['value']:.3f}, needs ≥ 0.90 (fails" in text


def test_it_counts_the_rows_of_a_quarantined_partition_as_held_whatever_their_verdict():
    run = make_run()
    held_run(run)
    data = json.loads(runstatus(str(run.pk), "--json"))
    assert data["observations_by_validation"] == SHOWN
    assert data["observations"] == sum(SHOWN.values())
