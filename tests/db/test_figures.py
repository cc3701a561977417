"""Each dashboard figure against its one definition (recovery.quality.figures.GLOSSARY).

Throughput over worker-active minutes only, ETA only while collecting with a worker alive,
the blocked reasons, the batch confirmation's count equal to the rows the batch resets, and a
finished batch's recovered / still failing / dead counts.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from recovery import counters
from recovery.models import (
    Attempt,
    RecoveryBatch,
    RemoteJob,
    Run,
    Task,
    ValidationResult,
    WorkerHeartbeat,
)
from recovery.quality import figures, reruns
from recovery.states import task as task_states
from tests.support.factories import make_dataset, make_run, make_tasks
from tests.support.held_rows import observe, quarantine
from tests.support.world import make_users, make_world

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
NOW = timezone.now().replace(second=30, microsecond=0)


def _attempts(run: Run, task: Task, minute_ago: int, n: int, outcome: str = "committed"):
    """n attempts of `run` that finished `minute_ago` whole minutes before NOW's minute, started
    at that minute's beginning (so a short run's first minute counts whole)."""
    finished = NOW.replace(second=10) - timedelta(minutes=minute_ago)
    Attempt.objects.bulk_create(
        Attempt(
            task=task,
            run=run,
            worker="w",
            started_at=finished.replace(second=0),
            finished_at=finished,
            outcome=outcome,
        )
        for _ in range(n)
    )


def _alive(worker: str = "w-alive", seconds_ago: int = 5, kind: str = "work") -> None:
    WorkerHeartbeat.objects.create(
        worker=worker, kind=kind, last_seen=NOW - timedelta(seconds=seconds_ago)
    )


def _figures(run: Run) -> figures.RunFigures:
    run = Run.objects.select_related("dataset").get(pk=run.pk)
    return figures.run_figures([run], now=NOW)[run.pk]


# --- throughput --------------------------------------------------------------------------------


def test_it_averages_throughput_over_worker_active_minutes_only():
    run = make_run()
    task = make_tasks(run, 1)[0]
    # Two busy minutes with a 20-minute idle gap between them, and one minute of retries.
    _attempts(run, task, 2, 40)
    _attempts(run, task, 25, 80)
    _attempts(run, task, 30, 10, outcome="retry")
    f = _figures(run)
    # (40 + 80 + 0) settled over 3 active minutes, not over the hour or the last 10 minutes.
    assert f.throughput == pytest.approx(40.0)


def test_it_takes_the_last_ten_active_minutes():
    run = make_run()
    task = make_tasks(run, 1)[0]
    for minute in range(1, 13):  # 12 active minutes: the two oldest (100/min) drop out
        _attempts(run, task, minute, 100 if minute > 10 else 10)
    assert _figures(run).throughput == pytest.approx(10.0)


def test_it_shows_no_throughput_when_nothing_ran_in_the_past_hour():
    run = make_run()
    task = make_tasks(run, 1)[0]
    _attempts(run, task, 61, 500)
    assert _figures(run).throughput is None


def test_a_short_run_divides_by_the_seconds_it_was_active_current_minute_included():
    """A demo run started at second 40 of a minute settled 141 tasks by its end, and 100 more
    in the next 30 s: whole minutes read "141/min" (and "ETA 20 min") for that whole next
    minute, and nothing at all during the first. 241 tasks in 20 s + 30 s of activity."""
    run = make_run()
    task = make_tasks(run, 1)[0]
    minute = NOW.replace(second=0) - timedelta(minutes=1)
    rows = [(minute + timedelta(seconds=40), minute + timedelta(seconds=55), 141)]
    rows.append((NOW.replace(second=0), NOW.replace(second=25), 100))
    for started, finished, n in rows:
        Attempt.objects.bulk_create(
            Attempt(
                task=task,
                run=run,
                worker="w",
                started_at=started,
                finished_at=finished,
                outcome="committed",
            )
            for _ in range(n)
        )
    assert _figures(run).throughput == pytest.approx(241 * 60 / 50)
    # In its first seconds (only the current minute active) it has a figure too.
    Attempt.objects.filter(finished_at__lt=NOW.replace(second=0)).delete()
    Attempt.objects.filter(run=run).update(started_at=NOW.replace(second=20))
    assert _figures(run).throughput == pytest.approx(100 * 60 / 10)


def test_a_run_with_ten_active_minutes_keeps_whole_minutes():
    run = make_run()
    task = make_tasks(run, 1)[0]
    for minute in range(1, 11):
        _attempts(run, task, minute, 6)
    _attempts(run, task, 0, 1000)  # the current minute does not count
    Attempt.objects.filter(run=run).update(started_at=NOW - timedelta(minutes=30))
    assert _figures(run).throughput == pytest.approx(6.0)


def test_it_counts_each_run_apart():
    a, b = make_run(), make_run()
    _attempts(a, make_tasks(a, 1)[0], 1, 30)
    _attempts(b, make_tasks(b, 1)[0], 1, 3)
    runs = list(Run.objects.select_related("dataset").filter(pk__in=[a.pk, b.pk]))
    result = figures.run_figures(runs, now=NOW)
    assert (result[a.pk].throughput, result[b.pk].throughput) == (30.0, 3.0)


# --- ETA and blocked reasons -------------------------------------------------------------------


def test_it_shows_an_eta_while_collecting_with_a_worker_alive():
    run = make_run()
    tasks = make_tasks(run, 100)
    make_tasks(run, 20, state="committed")
    _attempts(run, tasks[0], 1, 20)
    _alive()
    f = _figures(run)
    assert f.blocked == []
    assert f.remaining == 100
    assert f.eta_minutes == pytest.approx(100 / 20)


@pytest.mark.parametrize("state", ["candidate", "accepted", "published", "rejected"])
def test_it_never_shows_an_eta_on_a_finished_run(state):
    run = make_run()
    tasks = make_tasks(run, 5, state="committed")
    _attempts(run, tasks[0], 1, 50)
    _alive()
    Run.objects.filter(pk=run.pk).update(acceptance_state=state)
    f = _figures(run)
    assert f.throughput == 50.0
    assert f.eta_minutes is None
    assert f.eta_absent == f"run is {state}"
    assert f.blocked == []


def test_it_says_no_task_worker_alive_when_every_heartbeat_is_stale(settings):
    alive_seconds = settings.SALVAGE_WORKER_ALIVE_SECONDS
    run = make_run()
    tasks = make_tasks(run, 10)
    _attempts(run, tasks[0], 1, 20)
    _alive(seconds_ago=alive_seconds + 5)
    f = _figures(run)
    assert f.workers_alive == 0
    assert f.blocked == ["no task worker alive"]
    assert f.eta_minutes is None
    _alive("w-2", seconds_ago=alive_seconds - 5)
    assert _figures(run).eta_minutes == pytest.approx(10 / 20)


def test_a_dispatcher_and_a_delivery_loop_alive_are_no_task_worker():
    """The only `work` process SIGKILLed, its dispatcher and delivery loop still beating: the
    run page said "Workers alive 2 ... ETA 1 min" for ever. It says no ETA, and why."""
    run = make_run()
    tasks = make_tasks(run, 100)
    _attempts(run, tasks[0], 1, 20)
    _alive("dispatcher", kind="dispatch")
    _alive("deliverer", kind="deliver")
    _alive("killed-work", seconds_ago=3600)
    f = _figures(run)
    assert (f.workers_alive, f.eta_minutes) == (0, None)
    assert f.eta_absent == "no task worker alive"
    _alive("cluster-worker", kind="qcluster")
    f = _figures(run)
    assert (f.workers_alive, f.eta_minutes) == (1, pytest.approx(100 / 20))


def test_it_says_how_many_tasks_await_a_reconcile_decision():
    run = make_run()
    make_tasks(run, 5)
    held = make_tasks(run, 10, partition="p2")
    attempt = Attempt.objects.create(task=held[0], run=run, outcome="unknown")
    job = RemoteJob.objects.create(
        attempt=attempt, run=run, provider="messora", kind="batch", state="unknown"
    )
    task_states.hand_to_job(job, [t.pk for t in held], sources=["pending"])
    _attempts(run, held[0], 1, 20)
    _alive()
    f = _figures(run)
    assert f.blocked == ["blocked: 10 tasks await a reconcile decision"]
    assert f.eta_minutes is None
    # A decision taken elsewhere (the job is dismissed) unblocks the figure.
    RemoteJob.objects.filter(pk=job.pk).update(state="dismissed")
    assert _figures(run).blocked == []


def test_each_eta_reason_is_true_of_its_run():
    """In a run's first minute the page said "nothing ran in the past hour"."""
    _alive()
    run = make_run()
    tasks = make_tasks(run, 10)
    f = _figures(run)  # created just now, nothing finished
    assert (f.eta_minutes, f.eta_absent) == (None, "no attempt of the run has finished yet")
    Run.objects.filter(pk=run.pk).update(created_at=NOW - timedelta(hours=2))
    _attempts(run, tasks[0], 61, 5)  # ran, but more than an hour ago
    assert _figures(run).eta_absent == "nothing ran in the past hour"
    _attempts(run, tasks[0], 1, 5, outcome="retry")  # ran, settled nothing
    f = _figures(run)
    assert (f.throughput, f.eta_minutes) == (0.0, None)
    assert (
        f.eta_absent == "attempts finished, but no task settled in the run's worker-active minutes"
    )
    Task.objects.filter(run=run).update(state="committed")
    counters.rebuild(run.pk)
    assert _figures(run).eta_absent == "every task settled"


# --- coverage, side by side --------------------------------------------------------------------


def test_it_shows_committed_and_acceptance_coverage_side_by_side():
    dataset = make_dataset()
    dataset.spec = dict(dataset.spec, rules=[{"name": "cov", "kind": "coverage", "min": 0.9}])
    dataset.save()
    run = make_run(dataset)
    make_tasks(run, 949, state="committed")
    make_tasks(run, 51, state="quarantined")
    ValidationResult.objects.create(
        run=run, rule="cov", partition="", passed=False, value=0.754, threshold=0.9
    )
    f = _figures(run)
    assert f.committed_coverage == pytest.approx(0.949)
    check = f.acceptance_coverage
    assert (check.shown_value, check.shown_threshold, check.passed) == ("0.754", "≥ 0.90", False)
    assert [c.failure for c in f.failing_rules] == ["cov 0.754, needs ≥ 0.90"]


def test_it_says_a_dataset_without_a_coverage_rule_has_none():
    """A settled candidate of a dataset with no coverage rule said "not evaluated yet"."""
    dataset = make_dataset()
    dataset.spec = dict(dataset.spec, rules=[{"name": "p", "kind": "range", "field": "price"}])
    dataset.save()
    run = make_run(dataset)
    make_tasks(run, 3, state="committed")
    Run.objects.filter(pk=run.pk).update(acceptance_state="candidate")
    f = _figures(run)
    assert f.acceptance_coverage is None
    assert f.coverage_absent == "no coverage rule (the dataset's spec has none)"
    users = make_users()
    client = Client()
    client.force_login(users["operator"])
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert "no coverage rule" in html
    assert "not evaluated yet" not in html
    # With a coverage rule that has not run yet, the words are the old ones, and true.
    dataset.spec = dict(dataset.spec, rules=[{"name": "cov", "kind": "coverage", "min": 0.9}])
    dataset.save()
    assert _figures(run).coverage_absent.startswith("not evaluated yet")


@pytest.mark.parametrize(
    "kind,value,threshold,shown",
    [
        ("coverage", 0.9583333333333334, 0.9, ("0.958", "≥ 0.90")),
        ("required", 1.0, 1.0, ("1.000", "≥ 1.00")),
        ("partition_invalid_share", 0.0625, 0.05, ("0.062", "≤ 0.05")),
        ("range", 0.001, 0.005, ("0.001", "≤ 0.005")),
    ],
)
def test_it_rounds_rule_values_and_names_the_comparison(kind, value, threshold, shown):
    result = ValidationResult(
        rule="r", partition="p1", passed=True, value=value, threshold=threshold
    )
    check = figures.rule_check(result, {"r": kind})
    assert (check.shown_value, check.shown_threshold) == shown


def test_a_partition_rules_run_level_row_names_the_partitions_it_holds():
    """It read "partition_invalid_prices · run · 1.000 · ≤ 0.05 · pass" (the worst partition's
    share against the maximum, passing), and the held partitions were not shown."""
    dataset = make_dataset()
    rule = {"name": "pip", "kind": "partition_invalid_share", "field": "price", "max": 0.05}
    dataset.spec = dict(dataset.spec, rules=[rule])
    dataset.save()
    run = make_run(dataset)
    rows = [("", 1.0, {"held": ["p2", "p3"]}), ("p1", 0.0, {}), ("p2", 1.0, {}), ("p3", 0.5, {})]
    for partition, value, detail in rows:
        ValidationResult.objects.create(
            run=run,
            rule="pip",
            partition=partition,
            passed=value <= 0.05,
            value=value,
            threshold=0.05,
            detail=detail,
        )
    ValidationResult.objects.filter(run=run, partition="").update(passed=True)
    checks = {c.partition: c for c in figures.rule_checks(run)}
    top = checks[""]
    assert (top.shown_value, top.shown_threshold) == ("—", "each partition ≤ 0.05")
    assert top.held_text == "holds 2 partitions: p2, p3"
    assert (checks["p2"].shown_value, checks["p2"].shown_threshold) == ("1.000", "≤ 0.05")
    users = make_users()
    client = Client()
    client.force_login(users["operator"])
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert "holds 2 partitions: p2, p3" in html
    assert "each partition ≤ 0.05" in html
    ValidationResult.objects.filter(run=run, partition="").update(detail={"held": []})
    top = next(c for c in figures.rule_checks(run) if c.partition == "")
    assert top.held_text == "holds no partition"


# --- recovery batches --------------------------------------------------------------------------


@pytest.fixture
def batch_run():
    run = make_run(make_dataset())
    make_tasks(run, 3, partition="a", state="committed")
    make_tasks(run, 4, partition="b", state="quarantined")
    make_tasks(run, 2, partition="b", state="dead")
    make_tasks(run, 5, partition="b", state="pending")  # not settled: never selected
    make_tasks(run, 6, partition="c", state="quarantined")
    Task.objects.filter(run=run, partition="b", state="quarantined").update(
        last_error_class="selector_failure"
    )
    Task.objects.filter(run=run, partition="c").update(last_error_class="access_denied")
    return run


@pytest.mark.parametrize(
    "selection,expected",
    [
        ({"partitions": ["b"]}, 6),
        ({"partitions": ["b", "c"]}, 12),
        ({"error_classes": ["selector_failure"]}, 4),
        ({"partitions": ["b"], "error_classes": ["access_denied"]}, 0),
        ({"page_types": ["product"], "partitions": ["a", "c"]}, 9),
    ],
)
def test_it_confirms_exactly_the_number_of_tasks_the_batch_resets(batch_run, selection, expected):
    preview = reruns.preview_recovery_batch(batch_run.pk, **selection)
    assert preview.tasks == expected
    if not expected:
        with pytest.raises(reruns.RerunError, match="no terminal task"):
            reruns.create_recovery_batch(
                batch_run.pk, **selection, reason="r", scraper_version="2", actor="adam"
            )
        return
    batch = reruns.create_recovery_batch(
        batch_run.pk,
        **selection,
        reason="fixed",
        scraper_version="2",
        actor="adam",
        expected_tasks=preview.tasks,
    )
    reset = Task.objects.filter(recovery_batch=batch)
    assert batch.task_count == reset.count() == preview.tasks
    assert set(reset.values_list("state", flat=True)) == {"pending"}
    assert sum(preview.by_partition.values()) == preview.tasks


def test_it_refuses_a_batch_whose_count_moved_since_the_confirmation(batch_run):
    preview = reruns.preview_recovery_batch(batch_run.pk, partitions=["b"])
    # Meanwhile a pending task of the partition settles: the selection now matches 7.
    task = Task.objects.filter(run=batch_run, partition="b", state="pending").first()
    Task.objects.filter(pk=task.pk).update(state="dead")
    with pytest.raises(reruns.RerunError, match="now matches 7 tasks, not the 6"):
        reruns.create_recovery_batch(
            batch_run.pk,
            partitions=["b"],
            reason="fixed",
            scraper_version="2",
            actor="adam",
            expected_tasks=preview.tasks,
        )
    assert not RecoveryBatch.objects.exists()
    assert not Task.objects.filter(recovery_batch__isnull=False).exists()


def _settle(batch: RecoveryBatch, states: list[str]) -> None:
    """The batch's tasks end in `states` (what the workers' commits leave behind)."""
    tasks = list(Task.objects.filter(recovery_batch=batch).order_by("pk"))
    assert len(tasks) == len(states)
    for task, state in zip(tasks, states, strict=True):
        Task.objects.filter(pk=task.pk).update(state=state)
        counters.record([(task.run_id, task.partition, "pending", state, 1)])


def test_it_counts_recovered_still_failing_and_dead_when_a_batch_completes(batch_run):
    batch = reruns.create_recovery_batch(
        batch_run.pk, partitions=["b"], reason="fixed", scraper_version="2", actor="adam"
    )
    running = figures.batch_outcome(batch)
    assert (running.badge, running.tone) == ("running, 0 of 6 settled", "running")
    _settle(batch, ["committed", "committed", "quarantined", "dead", "dead", "gone"])
    assert reruns.complete_batch(batch.pk)
    batch.refresh_from_db()
    done = figures.batch_outcome(batch)
    assert (done.recovered, done.still_failing, done.dead, done.gone) == (2, 1, 2, 1)
    assert done.badge == "completed, 2 of 6 recovered"
    assert done.tone == "partial"
    # A later batch resets the same tasks: the first batch's outcome stays what it was.
    reruns.create_recovery_batch(
        batch_run.pk, partitions=["b"], reason="again", scraper_version="3", actor="adam"
    )
    batch.refresh_from_db()
    assert figures.batch_outcome(batch).counts == done.counts


def test_it_never_shows_a_batch_that_recovered_nothing_as_a_success(batch_run):
    batch = reruns.create_recovery_batch(
        batch_run.pk, partitions=["c"], reason="fixed", scraper_version="2", actor="adam"
    )
    _settle(batch, ["quarantined"] * 6)
    assert reruns.complete_batch(batch.pk)
    batch.refresh_from_db()
    outcome = figures.batch_outcome(batch)
    assert (outcome.badge, outcome.tone) == ("completed, 0 of 6 recovered", "bad")


# --- one definition, the same words everywhere --------------------------------------------------


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_it_documents_each_figure_in_the_same_words_in_the_readme():
    readme = _words((ROOT / "README.md").read_text(encoding="utf-8"))
    for key, (label, words) in figures.GLOSSARY.items():
        assert f"**{label}**: {_words(words)}" in readme, key


def test_it_shows_the_glossary_and_the_same_words_as_tooltips():
    users = make_users()
    world = make_world()
    client = Client()
    client.force_login(users["admin"])
    glossary = client.get(reverse("dashboard:glossary")).content.decode()
    run_page = client.get(reverse("dashboard:run", kwargs={"run_id": world.run.pk}))
    runs_page = client.get(reverse("dashboard:runs")).content.decode()
    html = run_page.content.decode()
    from django.utils.html import escape

    for key, (label, words) in figures.GLOSSARY.items():
        assert f'<dt id="{key}">{escape(label)}</dt><dd>{escape(words)}</dd>' in glossary
    for key in ("committed_coverage", "acceptance_coverage", "throughput", "eta"):
        assert f'title="{escape(figures.definition(key))}"' in html, key
        assert f'title="{escape(figures.definition(key))}"' in runs_page, key
    assert 'href="/glossary/"' in html  # the nav links to it
    # The world's remote job awaits a decision and holds its task: that run says why it waits.
    assert "blocked: 1 task awaits a reconcile decision" in runs_page


def test_it_shows_no_next_attempt_on_a_finished_task():
    users = make_users()
    world = make_world()
    client = Client()
    client.force_login(users["operator"])
    finished = client.get(reverse("dashboard:task", kwargs={"task_id": world.quarantined_task.pk}))
    assert b"next attempt" not in finished.content
    waiting = (
        Task.objects.filter(run=world.run, state="pending").first()
        or make_tasks(world.run, 1, partition="alpha.test")[0]
    )
    pending = client.get(reverse("dashboard:task", kwargs={"task_id": waiting.pk}))
    assert b"next attempt" in pending.content


def test_it_counts_a_committed_task_with_invalid_data_as_still_failing(batch_run):
    from recovery import keys
    from recovery.models import Observation

    batch = reruns.create_recovery_batch(
        batch_run.pk, partitions=["c"], reason="fixed", scraper_version="2", actor="adam"
    )
    _settle(batch, ["committed"] * 6)
    # Every task committed, but the dataset's rules still find two rows invalid.
    for i, task in enumerate(Task.objects.filter(recovery_batch=batch).order_by("pk")):
        Observation.objects.create(
            run=batch_run,
            observation_key=keys.observation_key(batch_run.dataset.name, task.url, "w"),
            entity_key=task.url,
            window=batch_run.window,
            partition="c",
            payload={"title": "" if i < 2 else "Kettle"},
            payload_hash=str(i),
            source_task=task,
        )
    assert reruns.complete_batch(batch.pk)  # judges the repaired partition: 2 rows invalid
    batch.refresh_from_db()
    outcome = figures.batch_outcome(batch)
    assert (outcome.recovered, outcome.still_failing) == (4, 2)
    assert outcome.badge == "completed, 4 of 6 recovered"
    assert reruns.recovered(batch) == (4, 6)


def test_it_counts_a_committed_task_whose_row_is_held_as_still_failing():
    # A row judged valid in a quarantined partition is held: its task did not recover.
    run = make_run(make_dataset())
    good = make_tasks(run, 2, partition="good", state="dead", host="good.test")
    bad = make_tasks(run, 2, partition="bad", state="dead", host="bad.test")
    batch = reruns.create_recovery_batch(
        run.pk, partitions=["good", "bad"], reason="fixed", scraper_version="2", actor="adam"
    )
    _settle(batch, ["committed"] * 4)
    for task, verdict in zip([*good, *bad], ["valid", "invalid", "valid", "valid"], strict=True):
        observe(task, verdict)
    quarantine(run, "bad")
    assert figures.outcome_counts(batch.pk)["invalid_data"] == 3
