"""Bulk actions on selected rows (dashboard.bulk): select -> confirm -> one engine call.

A bulk POST without its confirmation step changes nothing and shows the exact count; the
confirmed one does exactly what the single actions do one by one (the same rows, the same audit
entries); a count that moved meanwhile is refused whole; the redirect keeps the list's filters;
each bulk view needs its single action's permission (tests/db/test_dashboard_permissions.py
holds them in its table, so every role and forged or token-less POST is covered there).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import transaction
from django.urls import reverse

from recovery.models import (
    Attempt,
    AuditEntry,
    OutboxEvent,
    RecoveryBatch,
    RemoteJob,
    Schedule,
    Task,
)
from recovery.states import task as task_states
from tests.db.test_dashboard_permissions import POSTS, snapshot
from tests.support.factories import make_tasks
from tests.support.world import logged_in, make_users, make_world

BULK = [
    "dashboard:tasks_bulk",
    "dashboard:reconcile_bulk",
    "dashboard:deliveries_bulk",
    "dashboard:schedules_bulk",
]
# Each bulk view and the single action it repeats: the same permission, the same roles.
SINGLE = {
    "dashboard:tasks_bulk": "dashboard:create_batch",
    "dashboard:reconcile_bulk": "dashboard:reconcile_dismiss",
    "dashboard:deliveries_bulk": "dashboard:delivery_retry",
    "dashboard:schedules_bulk": "dashboard:schedule_toggle",
}
LISTS = {
    "dashboard:tasks_bulk": lambda w: reverse("dashboard:quarantine", args=[w.run.pk]),
    "dashboard:reconcile_bulk": lambda w: reverse("dashboard:reconcile"),
    "dashboard:deliveries_bulk": lambda w: reverse("dashboard:deliveries"),
    "dashboard:schedules_bulk": lambda w: reverse("dashboard:schedules"),
}


@pytest.fixture
def world(db):
    users = make_users()
    w = make_world()
    w.users = users
    Schedule.objects.create(
        dataset=w.run.dataset, name="nightly", kind="daily", at_time="06:00",
        manifest_source="previous",
    )  # fmt: skip
    return w


def _role(name: str) -> str:
    return sorted(POSTS[name].allowed)[0]


def _post(world, name: str, **changes):
    post = POSTS[name]
    data = {**post.body(world), **changes}
    data = {k: v for k, v in data.items() if v is not None}
    client = logged_in(world, _role(name))
    return client.post(reverse(name, kwargs=post.kwargs(world)), data)


@pytest.mark.parametrize("name", BULK)
def test_it_needs_the_single_actions_permission(name):
    assert POSTS[name].allowed == POSTS[SINGLE[name]].allowed


@pytest.mark.parametrize("name", BULK)
def test_it_changes_nothing_on_a_forged_post_without_the_confirmation(world, name):
    before = snapshot()
    unconfirmed = _post(world, name, confirmed=None, expected=None)
    assert unconfirmed.status_code == 200
    assert b'name="confirmed" value="1"' in unconfirmed.content
    count = unconfirmed.context["shown"].count
    assert count == int(POSTS[name].body(world)["expected"])
    assert f'name="expected" value="{count}"'.encode() in unconfirmed.content
    # "confirmed" without the count the page showed is no confirmation either.
    assert _post(world, name, expected=None).status_code == 200
    assert _post(world, name, expected="0").status_code == 200
    assert snapshot() == before
    assert not POSTS[name].happened(world)


@pytest.mark.parametrize("name", BULK)
def test_it_acts_on_the_confirmed_post_and_keeps_the_lists_filters(world, name):
    response = _post(world, name, query="state=failed&run=7&q=")
    assert response.status_code == 302
    # The list's own query string (blank values dropped), on the list the rows came from.
    assert response["Location"] == LISTS[name](world) + "?state=failed&run=7"
    assert POSTS[name].happened(world)
    follow = response.client.get(response["Location"])  # the same session: its messages
    messages = [str(m) for m in follow.context["messages"]]
    assert messages and messages[0][0].isdigit(), messages  # "N …"


@pytest.mark.parametrize("name", BULK)
def test_it_refuses_a_count_that_moved_and_changes_nothing(world, name):
    before = snapshot()
    response = _post(world, name, expected="99")
    assert response.status_code == 200  # the confirmation again, as things are now
    errors = [str(m) for m in response.context["messages"] if m.level_tag == "error"]
    assert errors and "not the 99 you confirmed" in errors[0], errors
    assert snapshot() == before


def test_it_lists_what_changes_and_what_is_left_alone(world):
    committed = Task.objects.filter(run=world.run, state="committed").order_by("pk")[0]
    pending = make_tasks(world.run, 1, partition="alpha.test", host="alpha.test")[0]
    client = logged_in(world, "admin")
    url = reverse("dashboard:tasks_bulk", args=[world.run.pk])
    page = client.post(url, {"action": "rerun", "pk": [committed.pk, pending.pk]})
    shown = page.context["shown"]
    assert shown.count == 1
    assert [row.label.split()[1] for row in shown.rows] == [f"#{committed.pk}"]
    assert shown.skipped == [f"task #{pending.pk} is pending: only settled tasks are rerun"]
    assert b"Yes, rerun 1 task" in page.content


def test_it_refuses_a_task_of_another_run(world):
    other = Task.objects.filter(run=world.accepted).first()
    client = logged_in(world, "admin")
    url = reverse("dashboard:tasks_bulk", args=[world.run.pk])
    response = client.post(url, {"action": "rerun", "pk": [other.pk]}, follow=True)
    errors = [str(m) for m in response.context["messages"] if m.level_tag == "error"]
    assert errors == [f"Refused: task {other.pk} is not in run {world.run.pk}"]


# --- a bulk action is the single actions, one by one -------------------------------------------


class Undo(Exception):
    pass


def _rows(old: dict[str, set]) -> dict:
    """The rows an action may change; rows it created are named by their content, not their id
    (PostgreSQL does not roll a sequence back)."""

    def named(model, pk):
        return pk if pk in old[model.__name__] else "new"

    return {
        "tasks": sorted(
            Task.objects.values_list(
                "pk", "state", "last_error_class", "recovery_batch__task_count"
            )
        ),
        "jobs": sorted(
            [
                (named(RemoteJob, pk), state, replaces, resolution, by)
                for pk, state, replaces, resolution, by in RemoteJob.objects.values_list(
                    "pk", "state", "replaces_id", "resolution", "resolved_by"
                )
            ],
            key=repr,
        ),
        "attempts": sorted(
            [
                (named(Attempt, pk), task, outcome, worker)
                for pk, task, outcome, worker in Attempt.objects.values_list(
                    "pk", "task_id", "outcome", "worker"
                )
            ],
            key=repr,
        ),
        "events": sorted(
            (str(pk), state, attempts)
            for pk, state, attempts in OutboxEvent.objects.values_list("pk", "state", "attempts")
        ),
        "due_now": sorted(
            str(pk)
            for pk in OutboxEvent.objects.filter(next_attempt_at__gte=old["since"]).values_list(
                "pk", flat=True
            )
        ),
        "schedules": sorted(Schedule.objects.values_list("pk", "paused")),
        "batches": sorted(RecoveryBatch.objects.values_list("task_count", "reason", "state")),
    }


def _audit(after: int, old: dict[str, set]) -> list:
    entries = []
    for e in AuditEntry.objects.filter(pk__gt=after).order_by("pk"):
        detail = dict(e.detail)
        if "replacement" in detail:
            detail["replacement"] = "new" if detail["replacement"] not in old["RemoteJob"] else 0
        if e.action == "create_recovery_batch":
            # Selected by task ids or by partition: what the batch reset is the same.
            detail["selection"] = detail["selection"]["touched_partitions"]
        object_id = "new" if e.object_type == "recoverybatch" else e.object_id
        entries.append((e.actor, e.action, e.object_type, object_id, e.reason, detail))
    return sorted(entries, key=repr)


def _effects(act: Callable[[], None]) -> dict:
    """What `act` changes, measured inside a savepoint that is then rolled back."""
    from django.utils import timezone

    captured: dict = {}
    try:
        with transaction.atomic():
            old = {
                "RemoteJob": set(RemoteJob.objects.values_list("pk", flat=True)),
                "Attempt": set(Attempt.objects.values_list("pk", flat=True)),
                "since": timezone.now(),
            }
            after = AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first()
            act()
            captured = {"rows": _rows(old), "audit": _audit(after, old)}
            raise Undo
    except Undo:
        pass
    return captured


def _ok(response) -> None:
    assert response.status_code == 302, response.content[:500]


def _second_job(world) -> RemoteJob:
    """Another open reconcile item on the remote run, holding its own task."""
    job = world.job
    task = make_tasks(job.run, 1, partition="beta.test", host="beta2.test")[0]
    attempt = Attempt.objects.create(task=task, run=job.run, worker="w-3", outcome="unknown")
    second = RemoteJob.objects.create(
        attempt=attempt, run=job.run, provider="messora", kind="batch", input_ref={},
        idempotency_key="idem-2", state="lookup_failed",
    )  # fmt: skip
    task_states.hand_to_job(second, [task.pk], sources=["pending"])
    return second


@pytest.mark.parametrize("decision", ["dismiss", "replace"])
def test_it_decides_reconcile_items_as_one_by_one(world, decision):
    jobs = [world.job.pk, _second_job(world).pk]
    client = logged_in(world, "operator")
    reason = {"reason": "the provider's console shows nothing"}

    def singles():
        for pk in jobs:
            url = reverse(f"dashboard:reconcile_{decision}", args=[pk])
            _ok(client.post(url, {**reason, "confirmed": "1"}))

    def together():
        data = {"action": decision, "pk": jobs, "expected": "2", "confirmed": "1", **reason}
        _ok(client.post(reverse("dashboard:reconcile_bulk"), data))

    one_by_one, bulk = _effects(singles), _effects(together)
    assert bulk == one_by_one
    assert [e[1] for e in bulk["audit"]] == [f"remote_{decision}"] * 2


def test_it_retries_deliveries_as_one_by_one(world):
    events = [str(world.failed_event.pk), str(world.uncertain_event.pk)]
    client = logged_in(world, "admin")

    def singles():
        for pk in events:
            _ok(client.post(reverse("dashboard:delivery_retry", args=[pk])))

    def together():
        data = {"action": "retry", "pk": events, "expected": "2", "confirmed": "1"}
        _ok(client.post(reverse("dashboard:deliveries_bulk"), data))

    def every_failing():
        data = {"action": "retry_failing", "expected": "2", "confirmed": "1"}
        _ok(client.post(reverse("dashboard:deliveries_bulk"), data))

    one_by_one = _effects(singles)
    assert _effects(together) == one_by_one
    assert _effects(every_failing) == one_by_one
    assert sorted(one_by_one["rows"]["due_now"]) == sorted(events)
    assert [e[1] for e in one_by_one["audit"]] == ["retry_delivery"] * 2


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_it_pauses_and_resumes_schedules_as_one_by_one(world, action):
    dataset = world.run.dataset
    for name in ("weekly", "monthly"):
        Schedule.objects.create(
            dataset=dataset, name=name, kind="daily", at_time="07:00",
            manifest_source="previous", paused=action == "resume",
        )  # fmt: skip
    Schedule.objects.filter(name="nightly").update(paused=action == "resume")
    chosen = list(Schedule.objects.order_by("pk").values_list("pk", flat=True))[:2]
    client = logged_in(world, "admin")

    def singles():
        for pk in chosen:
            url = reverse("dashboard:schedule_toggle", args=[pk])
            _ok(client.post(url, {"reason": "site migration"}))

    def together():
        data = {"action": action, "pk": chosen, "expected": "2", "confirmed": "1"}
        _ok(client.post(reverse("dashboard:schedules_bulk"), {**data, "reason": "site migration"}))

    one_by_one, bulk = _effects(singles), _effects(together)
    assert bulk == one_by_one
    done = "schedule_paused" if action == "pause" else "schedule_resumed"
    assert [e[1] for e in bulk["audit"]] == [done] * 2


def test_it_reruns_selected_tasks_as_the_partitions_batch(world):
    beta = list(
        Task.objects.filter(run=world.run, partition="beta.test").values_list("pk", flat=True)
    )
    client = logged_in(world, "admin")
    fields = {"reason": "selector fixed", "scraper_version": "2", "confirmed": "1"}

    def single():
        data = {"partitions": ["beta.test"], "expected_tasks": "2", **fields}
        _ok(client.post(reverse("dashboard:create_batch", args=[world.run.pk]), data))

    def together():
        data = {"action": "rerun", "pk": beta, "expected": "2", **fields}
        _ok(client.post(reverse("dashboard:tasks_bulk", args=[world.run.pk]), data))

    one, bulk = _effects(single), _effects(together)
    assert bulk == one
    assert [e[1] for e in bulk["audit"]] == ["create_recovery_batch"]
    assert bulk["audit"][0][5]["tasks"] == 2


def test_it_decides_all_or_none(world):
    """One job of the selection decided meanwhile: the count moved, nothing is decided."""
    second = _second_job(world)
    client = logged_in(world, "operator")
    data = {"action": "dismiss", "pk": [world.job.pk, second.pk], "expected": "2"}
    page = client.post(reverse("dashboard:reconcile_bulk"), data)
    assert page.context["shown"].count == 2
    from recovery.remote import reconcile

    reconcile.dismiss(second.pk, "someone-else", "decided meanwhile")
    entries = AuditEntry.objects.count()
    response = client.post(
        reverse("dashboard:reconcile_bulk"), {**data, "confirmed": "1", "reason": "r"}
    )
    assert response.status_code == 200
    assert RemoteJob.objects.get(pk=world.job.pk).state == "unknown"
    assert AuditEntry.objects.count() == entries
    assert response.context["shown"].count == 1
    assert response.context["shown"].skipped == [
        f"remote job #{second.pk} does not await a decision"
    ]


def test_it_records_who_and_why_for_each_row(world):
    client = logged_in(world, "operator")
    data = {"action": "dismiss", "pk": [world.job.pk], "expected": "1", "confirmed": "1"}
    client.post(reverse("dashboard:reconcile_bulk"), {**data, "reason": "withdrawn"})
    entry = AuditEntry.objects.get(action="remote_dismiss")
    assert (entry.actor, entry.reason, entry.object_id) == (
        "olivia",
        "withdrawn",
        str(world.job.pk),
    )
