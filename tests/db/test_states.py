"""Every allowed and every forbidden edge of the four state machines, on the real database.

Each machine is tested over the full state x state product: an allowed edge moves a row that is
in the source state (and reports True); a forbidden edge raises IllegalTransition and leaves the
row untouched; an allowed edge from a state the row is no longer in reports False.
"""

from __future__ import annotations

import itertools

import pytest
from django.db import IntegrityError, transaction

from recovery import counters
from recovery.models import Attempt, OutboxEvent, RemoteJob, Run, Task
from recovery.states import delivery, remote_job, run, task
from recovery.states.base import IllegalTransition
from recovery.states.delivery import DeliveryState
from recovery.states.remote_job import RemoteJobState
from recovery.states.run import RunState
from recovery.states.task import TaskState
from tests.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db


def edges(states, expected):
    return [
        pytest.param(s, t, (s, t) in expected, id=f"{s}->{t}")
        for s, t in itertools.product(states, states)
    ]


# The design's edges, written out independently of recovery.states (DESIGN.md section 2), so a
# move added to or dropped from a machine's table fails here instead of being trusted.
TASK_EDGES = {
    ("pending", "leased"),
    ("leased", "leased"),  # re-claim after the lease expired
    ("leased", "committed"),
    ("leased", "retry_wait"),
    ("leased", "quarantined"),
    ("leased", "gone"),
    ("leased", "dead"),
    ("retry_wait", "leased"),
    ("retry_wait", "pending"),
    # a recovery batch resets terminal tasks
    ("committed", "pending"),
    ("quarantined", "pending"),
    ("gone", "pending"),
    ("dead", "pending"),
}
RUN_EDGES = {
    ("collecting", "candidate"),
    ("candidate", "accepted"),
    ("candidate", "rejected"),
    ("candidate", "collecting"),  # a recovery batch reopens it
    ("rejected", "collecting"),
    ("accepted", "published"),
}
DELIVERY_EDGES = {
    ("unsent", "sending"),
    ("sending", "sending"),  # a crashed sender's expired lease
    ("sending", "delivered"),
    ("sending", "failed"),
    ("sending", "uncertain"),
    ("failed", "sending"),
    ("uncertain", "sending"),
}
_POLL = {"pending", "completed", "failed", "revoked", "lookup_failed"}
_RESOLVE = {"submitted", "replaced", "dismissed"}
REMOTE_JOB_EDGES = {
    ("created", "submitted"),
    ("created", "unknown"),
    ("created", "failed"),
    *(("submitted", t) for t in _POLL),
    *(("pending", t) for t in _POLL),
    ("completed", "pending"),  # a cloud job's "Continue"
    *(("unknown", t) for t in _RESOLVE),
    *(("lookup_failed", t) for t in _RESOLVE),
}


@pytest.mark.parametrize(
    ("allowed", "expected"),
    [
        (task.ALLOWED, TASK_EDGES),
        (run.ALLOWED, RUN_EDGES),
        (delivery.ALLOWED, DELIVERY_EDGES),
        (remote_job.ALLOWED, REMOTE_JOB_EDGES),
    ],
    ids=["task", "run", "delivery", "remote_job"],
)
def test_each_machine_allows_exactly_the_designed_edges(allowed, expected):
    assert {(s, t) for s, targets in allowed.items() for t in targets} == expected


def test_every_state_has_an_entry_in_its_table():
    for choices, allowed in [
        (TaskState, task.ALLOWED),
        (RunState, run.ALLOWED),
        (DeliveryState, delivery.ALLOWED),
        (RemoteJobState, remote_job.ALLOWED),
    ]:
        assert set(allowed) == set(choices.values)
        for targets in allowed.values():
            assert set(targets) <= set(choices.values)


# --- task ---------------------------------------------------------------------------------


def leased_task(state: str, *, owner="w1", token=7) -> Task:
    r = make_run()
    (t,) = make_tasks(r, 1, state=state, partition="p")
    if state == TaskState.LEASED:
        Task.objects.filter(pk=t.pk).update(lease_owner=owner, lease_token=token)
        t.refresh_from_db()
    return t


@pytest.mark.parametrize(("source", "target", "allowed"), edges(TaskState.values, TASK_EDGES))
def test_task_edges(source, target, allowed):
    t = leased_task(source)
    # Only moves out of a lease present one (its owner and token are the fence).
    lease = {"owner": "w1", "lease_token": 7} if source == "leased" != target else {}
    before = counters.by_state(t.run_id)
    if not allowed:
        with pytest.raises(IllegalTransition, match=f"{source} -> {target}"):
            task.move(t, source, target, owner="w1", lease_token=7)
        t.refresh_from_db()
        assert t.state == source
        assert counters.by_state(t.run_id) == before
        return
    assert task.move(t, source, target, **lease) is True
    t.refresh_from_db()
    assert t.state == target
    if target != TaskState.LEASED:
        assert t.lease_owner == ""
        assert t.lease_until is None
    expected = {target: 1}
    assert counters.by_state(t.run_id) == expected
    # The same move again finds the row no longer in `source` (unless it is a self-loop).
    if source != target:
        assert task.move(t, source, target, **lease) is False


@pytest.mark.parametrize(
    ("source", "target"), [("pending", "leased"), ("leased", "leased"), ("retry_wait", "pending")]
)
@pytest.mark.parametrize("fence", [{"owner": "w1"}, {"lease_token": 3}])
def test_task_moves_without_a_lease_refuse_fence_arguments(source, target, fence):
    # A lease_token here would be read as a fence and silently ignored, not set: refuse it.
    t = leased_task(source)
    with pytest.raises(IllegalTransition, match="fence moves out of leased"):
        task.move(t, source, target, **fence)
    t.refresh_from_db()
    assert t.state == source


@pytest.mark.parametrize("target", sorted(task.ALLOWED[TaskState.LEASED] - {TaskState.LEASED}))
@pytest.mark.parametrize(("owner", "token"), [("w2", 7), ("w1", 8), ("w2", 6), ("", 7)])
def test_task_moves_out_of_leased_are_fenced_by_owner_and_token(target, owner, token):
    t = leased_task(TaskState.LEASED, owner="w1", token=7)
    before = counters.by_state(t.run_id)
    assert task.move(t, TaskState.LEASED, target, owner=owner, lease_token=token) is False
    t.refresh_from_db()
    assert (t.state, t.lease_owner, t.lease_token) == (TaskState.LEASED, "w1", 7)
    assert counters.by_state(t.run_id) == before


@pytest.mark.parametrize(("owner", "token"), [(None, 7), ("w1", None), (None, None)])
def test_task_moves_out_of_leased_need_the_lease(owner, token):
    t = leased_task(TaskState.LEASED)
    with pytest.raises(IllegalTransition, match="owner and lease_token"):
        task.move(t, TaskState.LEASED, TaskState.COMMITTED, owner=owner, lease_token=token)
    t.refresh_from_db()
    assert t.state == TaskState.LEASED


def test_task_move_rolls_back_with_the_enclosing_transaction():
    t = leased_task(TaskState.LEASED)
    with pytest.raises(RuntimeError), transaction.atomic():
        task.move(t, TaskState.LEASED, TaskState.COMMITTED, owner="w1", lease_token=7)
        raise RuntimeError("the commit of the observation failed")
    t.refresh_from_db()
    assert t.state == TaskState.LEASED
    assert counters.by_state(t.run_id) == {TaskState.LEASED: 1}


def test_reset_for_batch_moves_only_terminal_tasks_and_keeps_counters_exact():
    r = make_run()
    done = make_tasks(r, 3, state=TaskState.COMMITTED, partition="a")
    dead = make_tasks(r, 2, state=TaskState.DEAD, partition="b")
    busy = make_tasks(r, 1, state=TaskState.LEASED, partition="b")
    moved = task.reset_for_batch(r.pk, [t.pk for t in done + dead + busy], batch_id=None)
    assert moved == 5
    assert counters.by_state(r.pk) == {TaskState.PENDING: 5, TaskState.LEASED: 1}
    counters.rebuild(r.pk)
    assert counters.by_state(r.pk) == {TaskState.PENDING: 5, TaskState.LEASED: 1}


# --- run ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target", "allowed"), edges(RunState.values, RUN_EDGES))
def test_run_edges(source, target, allowed):
    r = make_run(acceptance_state=source)
    if not allowed:
        with pytest.raises(IllegalTransition, match=f"{source} -> {target}"):
            run.move(r.pk, source, target)
        assert Run.objects.get(pk=r.pk).acceptance_state == source
        return
    assert run.move(r.pk, source, target) is True
    r.refresh_from_db()
    assert r.acceptance_state == target
    stamp = {"candidate": "candidate_at", "accepted": "accepted_at", "published": "published_at"}
    if target in stamp:
        assert getattr(r, stamp[target]) is not None
    assert run.move(r.pk, source, target) is False


# --- delivery -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target", "allowed"), edges(DeliveryState.values, DELIVERY_EDGES)
)
def test_delivery_edges(source, target, allowed):
    event = OutboxEvent.objects.create(event_type="accepted", state=source)
    if not allowed:
        with pytest.raises(IllegalTransition, match=f"{source} -> {target}"):
            delivery.move(OutboxEvent, event.pk, source, target)
        assert OutboxEvent.objects.get(pk=event.pk).state == source
        return
    assert delivery.move(OutboxEvent, event.pk, source, target, attempts=1) is True
    event.refresh_from_db()
    assert (event.state, event.attempts) == (target, 1)
    if source != target:
        assert delivery.move(OutboxEvent, event.pk, source, target) is False


def test_delivery_moves_a_remote_job_handoff_by_its_own_field():
    job = make_remote_job(RemoteJobState.COMPLETED, handoff_state=DeliveryState.UNSENT)
    assert delivery.move(
        RemoteJob, job.pk, DeliveryState.UNSENT, DeliveryState.SENDING, field="handoff_state"
    )
    job.refresh_from_db()
    assert (job.state, job.handoff_state) == (RemoteJobState.COMPLETED, DeliveryState.SENDING)


# --- remote job ---------------------------------------------------------------------------


def make_remote_job(state: str, **fields) -> RemoteJob:
    r = make_run()
    (t,) = make_tasks(r, 1, state=TaskState.LEASED)
    attempt = Attempt.objects.create(task=t, run=r, outcome=Attempt.Outcome.RUNNING)
    return RemoteJob.objects.create(
        attempt=attempt, run=r, provider="messora", kind="batch", state=state, **fields
    )


@pytest.mark.parametrize(
    ("source", "target", "allowed"), edges(RemoteJobState.values, REMOTE_JOB_EDGES)
)
def test_remote_job_edges(source, target, allowed):
    job = make_remote_job(source)
    if not allowed:
        with pytest.raises(IllegalTransition, match=f"{source} -> {target}"):
            remote_job.move(job.pk, source, target)
        assert RemoteJob.objects.get(pk=job.pk).state == source
        return
    assert remote_job.move(job.pk, source, target, poll_failures=2) is True
    job.refresh_from_db()
    assert (job.state, job.poll_failures) == (target, 2)
    if source != target:
        assert remote_job.move(job.pk, source, target) is False


def test_attach_job_id_saves_the_id_and_moves_to_submitted():
    job = make_remote_job(RemoteJobState.CREATED)
    assert remote_job.attach_job_id(job.pk, "job-1") is True
    job.refresh_from_db()
    assert (job.state, job.provider_job_id) == (RemoteJobState.SUBMITTED, "job-1")
    assert job.submitted_at is not None


def test_attach_job_id_rejects_a_different_second_id():
    job = make_remote_job(RemoteJobState.UNKNOWN, provider_job_id="job-1")
    with pytest.raises(ValueError, match="different provider job id"):
        remote_job.attach_job_id(job.pk, "job-2", source=RemoteJobState.UNKNOWN)
    job.refresh_from_db()
    assert (job.state, job.provider_job_id) == (RemoteJobState.UNKNOWN, "job-1")


def test_attach_job_id_accepts_the_same_id_again_from_reconcile():
    job = make_remote_job(RemoteJobState.LOOKUP_FAILED, provider_job_id="job-1")
    assert remote_job.attach_job_id(job.pk, "job-1", source=RemoteJobState.LOOKUP_FAILED)
    job.refresh_from_db()
    assert (job.state, job.provider_job_id) == (RemoteJobState.SUBMITTED, "job-1")


def test_attach_job_id_refuses_a_job_no_longer_in_the_source_state():
    job = make_remote_job(RemoteJobState.PENDING)
    with pytest.raises(ValueError, match="not in created"):
        remote_job.attach_job_id(job.pk, "job-1")


@pytest.mark.parametrize("bad", ["", None])
def test_attach_job_id_needs_an_id(bad):
    job = make_remote_job(RemoteJobState.CREATED)
    with pytest.raises(ValueError, match="non-empty"):
        remote_job.attach_job_id(job.pk, bad)


@pytest.mark.parametrize(
    "source", sorted(set(RemoteJobState.values) - {RemoteJobState.UNKNOWN, "lookup_failed"})
)
def test_attach_job_id_is_only_a_move_to_submitted_from_allowed_states(source):
    job = make_remote_job(source)
    if RemoteJobState.SUBMITTED in remote_job.ALLOWED[source]:
        assert remote_job.attach_job_id(job.pk, "job-9", source=source)
    else:
        with pytest.raises(IllegalTransition):
            remote_job.attach_job_id(job.pk, "job-9", source=source)


def test_two_jobs_cannot_share_one_provider_job_id():
    make_remote_job(RemoteJobState.SUBMITTED, provider_job_id="job-1")
    other = make_remote_job(RemoteJobState.CREATED)
    with pytest.raises(IntegrityError), transaction.atomic():
        remote_job.attach_job_id(other.pk, "job-1")
    other.refresh_from_db()
    assert other.provider_job_id is None
    assert other.state == RemoteJobState.CREATED
