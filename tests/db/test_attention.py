"""The "needs attention" page (/attention/) and the count in every page's top bar.

Each condition, seeded alone: it appears with its count, its link opens its list filtered to
exactly the seeded rows, and the top bar shows the same total; cleared, it disappears. The
summary is computed once per request, in a bounded number of queries, and never counts tasks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import time, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from recovery import attention
from recovery.intake import recurrence
from recovery.models import (
    Attempt,
    OutboxEvent,
    RemoteJob,
    Run,
    RunPartition,
    Schedule,
    ValidationResult,
    WorkerHeartbeat,
)
from recovery.quality import triage
from recovery.remote import reconcile
from recovery.states import task as task_states
from tests.support.factories import force_state, make_dataset, make_run, make_tasks
from tests.support.world import logged_in, make_users

pytestmark = pytest.mark.django_db

COUNT_TASKS = re.compile(r'COUNT\(.*FROM "?recovery_task"?\b', re.IGNORECASE | re.DOTALL)


@dataclass
class Seeded:
    counts: dict[str, int]  # every condition the seed raises, with its count
    rows: list  # the rows the condition's link must list (pks)
    clear: Callable[[], None]


class World:
    users: dict


@pytest.fixture
def world(db):
    w = World()
    w.users = make_users()
    # A task worker alive: otherwise every collecting run counts as blocked.
    WorkerHeartbeat.objects.create(worker="alive-1", kind="work", hostname="h", pid=1)
    return w


def _failing_candidate() -> Seeded:
    run = make_run(acceptance_state="candidate")
    result = ValidationResult.objects.create(run=run, rule="coverage", passed=False, value=0.5)
    ValidationResult.objects.create(run=run, rule="rows", passed=True)
    make_run(acceptance_state="candidate")  # a candidate that passes: not counted
    return Seeded(
        {attention.FAILING_CANDIDATES: 1},
        [run.pk],
        lambda: ValidationResult.objects.filter(pk=result.pk).update(passed=True),
    )


def _open_job(run: Run, state: str = "unknown") -> RemoteJob:
    task = make_tasks(run, 1, partition="p1")[0]
    attempt = Attempt.objects.create(task=task, run=run, worker="w", outcome="unknown")
    job = RemoteJob.objects.create(
        attempt=attempt, run=run, provider="messora", kind="batch", input_ref={}, state=state
    )
    task_states.hand_to_job(job, [task.pk], sources=["pending"])
    return job


def _waiting_reconcile() -> Seeded:
    run = make_run(make_dataset(provider="messora"))
    job = _open_job(run)
    # Its held task blocks its collecting run too (the run page's "blocked").
    return Seeded(
        {attention.RECONCILE_WAITING: 1, attention.BLOCKED_RUNS: 1},
        [job.pk],
        lambda: reconcile.dismiss(job.pk, "olivia", "gone"),
    )


def _blocked_by_reconcile() -> Seeded:
    run = make_run(make_dataset(provider="messora"))
    make_run()  # collecting and not blocked: a worker is alive, nothing awaits a decision
    job = _open_job(run, state="lookup_failed")
    return Seeded(
        {attention.BLOCKED_RUNS: 1, attention.RECONCILE_WAITING: 1},
        [run.pk],
        lambda: reconcile.dismiss(job.pk, "olivia", "gone"),
    )


def _blocked_without_workers() -> Seeded:
    run = make_run()
    make_run(acceptance_state="accepted")  # not collecting: never blocked
    WorkerHeartbeat.objects.all().delete()

    def clear():
        WorkerHeartbeat.objects.create(worker="alive-2", kind="qcluster", hostname="h", pid=3)

    return Seeded({attention.BLOCKED_RUNS: 1}, [run.pk], clear)


def _unreviewed_quarantine() -> Seeded:
    run = make_run()
    make_tasks(run, 1, partition="beta.test", state="quarantined")
    RunPartition.objects.create(run=run, name="beta.test", quarantined=True)
    reviewed = make_run()
    RunPartition.objects.create(run=reviewed, name="x", quarantined=True, reviewed_by="olivia")
    rejected = make_run(acceptance_state="rejected")
    RunPartition.objects.create(run=rejected, name="y", quarantined=True)
    return Seeded(
        {attention.UNREVIEWED_QUARANTINE: 1},
        [run.pk],
        lambda: triage.mark_reviewed(run.pk, "beta.test", "olivia"),
    )


def _failing_deliveries() -> Seeded:
    run = make_run(acceptance_state="accepted")
    failed = OutboxEvent.objects.create(run=run, event_type="accepted", state="failed")
    uncertain = OutboxEvent.objects.create(run=run, event_type="accepted", state="uncertain")
    OutboxEvent.objects.create(run=run, event_type="accepted", state="delivered")
    OutboxEvent.objects.create(run=run, event_type="published", state="unsent")

    def clear():
        OutboxEvent.objects.filter(pk__in=[failed.pk, uncertain.pk]).update(state="delivered")

    return Seeded({attention.FAILING_DELIVERIES: 2}, [uncertain.pk, failed.pk], clear)


def _schedule(name: str, **fields) -> Schedule:
    values = {
        "dataset": make_dataset(),
        "name": name,
        "kind": "daily",
        "at_time": time(6, 0),
        "manifest_source": "previous",
        "created_at": timezone.now() - timedelta(days=2),
    }
    values.update(fields)
    return Schedule.objects.create(**values)


def _caught_up(schedule: Schedule) -> None:
    """What the dispatcher leaves behind once it made the newest due window's run."""
    now = timezone.now()
    instant = list(recurrence.occurrences(schedule, schedule.created_at, now))[-1]
    Schedule.objects.filter(pk=schedule.pk).update(
        last_due_at=instant, last_window=recurrence.window_for(schedule, instant)
    )


def _overdue_schedules() -> Seeded:
    late = _schedule("late", last_error="previous: no previous run", failures=2)
    _schedule("paused", paused=True)
    _caught_up(_schedule("on-time"))
    return Seeded({attention.OVERDUE_SCHEDULES: 1}, [late.pk], lambda: _caught_up(late))


def _dead_workers() -> Seeded:
    run = make_run()
    tasks = make_tasks(run, 1, state="pending")
    stale = timezone.now() - timedelta(minutes=2)
    dead = WorkerHeartbeat.objects.create(worker="w-dead", kind="work", last_seen=stale)
    WorkerHeartbeat.objects.create(
        worker="w-stopped", kind="work", last_seen=stale, stopped_at=stale
    )  # a clean exit: not dead
    return Seeded(
        {attention.DEAD_WORKERS: 1},
        [dead.pk],
        lambda: force_state(tasks[0], "committed"),  # nothing is due any more
    )


SEEDS = {
    "failing_candidates": _failing_candidate,
    "reconcile_waiting": _waiting_reconcile,
    "blocked_by_reconcile": _blocked_by_reconcile,
    "blocked_without_workers": _blocked_without_workers,
    "unreviewed_quarantine": _unreviewed_quarantine,
    "failing_deliveries": _failing_deliveries,
    "overdue_schedules": _overdue_schedules,
    "dead_workers": _dead_workers,
}
# The condition whose link a seed checks (the first of its counts).
LINKED = {
    "failing_candidates": ("dashboard:runs", {"needs": "failing_candidates"}),
    "reconcile_waiting": ("dashboard:reconcile", {}),
    "blocked_by_reconcile": ("dashboard:runs", {"needs": "blocked_runs"}),
    "blocked_without_workers": ("dashboard:runs", {"needs": "blocked_runs"}),
    "unreviewed_quarantine": ("dashboard:runs", {"needs": "unreviewed_quarantine"}),
    "failing_deliveries": ("dashboard:deliveries", {"needs": "failing_deliveries"}),
    "overdue_schedules": ("dashboard:schedules", {"needs": "overdue_schedules"}),
    "dead_workers": ("dashboard:workers", {"status": "stale"}),
}


def _shown(client) -> dict[str, tuple[int, str]]:
    """{condition: (count, its link)} as the attention page shows them."""
    html = client.get(reverse("dashboard:attention")).content.decode()
    found = re.findall(
        r'id="attention-(\w+)" data-count="(\d+)">\s*<h2><a href="([^"]+)" class="attention-list"',
        html,
    )
    return {key: (int(count), href.replace("&amp;", "&")) for key, count, href in found}


def _top_bar(client, url: str) -> int:
    html = client.get(url).content.decode()
    match = re.search(r'id="attention-count">(\d+)</span>', html)
    return int(match.group(1)) if match else 0


def _listed(response) -> list:
    context = response.context
    if "listing" in context:
        return [row.pk for row in context["listing"].rows]
    return [row["schedule"].pk for row in context["rows"]]


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_it_shows_each_condition_with_its_count_and_link_until_cleared(world, seed):
    client = logged_in(world, "operator")
    assert _shown(client) == {}
    assert _top_bar(client, reverse("dashboard:runs")) == 0
    seeded = SEEDS[seed]()

    shown = _shown(client)
    view, params = LINKED[seed]
    key = next(iter(seeded.counts))
    expected_link = reverse(view) + "".join(
        f"{'?' if i == 0 else '&'}{k}={v}" for i, (k, v) in enumerate(params.items())
    )
    assert {k: count for k, (count, _link) in shown.items()} == seeded.counts
    assert shown[key][1] == expected_link
    # The link lists exactly the rows behind the count (and the top bar adds them up).
    assert sorted(map(str, _listed(client.get(expected_link)))) == sorted(map(str, seeded.rows))
    assert _top_bar(client, reverse("dashboard:runs")) == sum(seeded.counts.values())
    assert _top_bar(client, reverse("dashboard:attention")) == sum(seeded.counts.values())

    seeded.clear()  # clears what the seed raised (a dismissed job unblocks its run too)
    assert _shown(client) == {}
    assert _top_bar(client, reverse("dashboard:glossary")) == 0


def test_it_names_the_rows_and_links_each_to_where_it_is_dealt_with(world):
    _unreviewed_quarantine()
    _failing_deliveries()
    page = logged_in(world, "operator").get(reverse("dashboard:attention"))
    html = page.content.decode()
    run = RunPartition.objects.get(name="beta.test").run_id
    assert f'href="{reverse("dashboard:quarantine", args=[run])}"' in html
    assert "not reviewed: beta.test" in html
    assert "Checked, nothing found:" in html and "Dead workers" in html
    assert html.count('class="card attention-item"') == 2


def test_it_says_when_nothing_needs_attention(world):
    page = logged_in(world, "operator").get(reverse("dashboard:attention"))
    assert b'id="attention-clear-all"' in page.content


def test_it_is_for_operators_and_admins_only(world):
    assert logged_in(world, "exporter").get(reverse("dashboard:attention")).status_code == 403
    exports = logged_in(world, "exporter").get(reverse("dashboard:exports")).content
    assert b'id="attention-link"' not in exports
    assert (
        b'id="attention-link"' in logged_in(world, "admin").get(reverse("dashboard:runs")).content
    )


def test_it_computes_the_summary_once_per_request(world, monkeypatch):
    calls = []
    real = attention.summary

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "summary", counted)
    client = logged_in(world, "operator")
    client.get(reverse("dashboard:attention"))
    assert calls == [{"items": True}]  # the page's, which the top bar reuses
    client.get(reverse("dashboard:runs"))
    assert calls == [{"items": True}, {"items": False}]


def test_it_counts_in_a_few_bounded_queries_and_never_counts_tasks(world):
    for seed in SEEDS.values():
        seed()
    with CaptureQueriesContext(connection) as captured:
        found = attention.summary()
    assert found.count() > 0
    assert len(captured.captured_queries) <= 10
    for query in captured.captured_queries:
        assert not COUNT_TASKS.search(query["sql"]), query["sql"]


def test_it_caps_a_count(world, monkeypatch):
    monkeypatch.setattr(attention, "CAP", 2)
    for _ in range(4):
        OutboxEvent.objects.create(event_type="accepted", state="failed")
    condition = attention.summary().get(attention.FAILING_DELIVERIES)
    assert (condition.count, condition.shown) == (3, "2+")


def test_it_says_when_schedules_past_its_limit_were_not_looked_at(world, monkeypatch):
    monkeypatch.setattr(attention, "MAX_SCHEDULES", 2)
    for name in ("a-on-time", "b-on-time"):
        _caught_up(_schedule(name))
    late = _schedule("c-late")  # by dataset and name, past the limit: never evaluated
    condition = attention.summary().get(attention.OVERDUE_SCHEDULES)
    assert condition.count == 0
    assert "1 more were not" in condition.note
    html = logged_in(world, "operator").get(reverse("dashboard:attention")).content.decode()
    assert 'id="attention-note-overdue_schedules"' in html
    clear = re.search(r'id="attention-clear">([^<]*)<', html)
    assert clear and "Overdue schedules" not in clear.group(1)  # not "checked, nothing found"

    monkeypatch.setattr(attention, "MAX_SCHEDULES", 3)  # all looked at: found, and no note
    condition = attention.summary(items=True).get(attention.OVERDUE_SCHEDULES)
    assert (condition.count, condition.note) == (1, "")
    assert [item.pk for item in condition.items] == [late.pk]
