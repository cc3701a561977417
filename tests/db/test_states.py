"""Every allowed and every forbidden edge of the four state machines, on the real database.

Each machine is tested over the full state x state product: an allowed edge moves a row that is
in the source state (and reports True); a forbidden edge raises IllegalTransition and leaves the
row untouched; an allowed edge from a state the row is no longer in reports False.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from recovery import counters, leases
from recovery.models import Attempt, Observation, OutboxEvent, RemoteJob, Run, Task
from recovery.outcomes import ErrorClass, Outcome
from recovery.remote.jobs import claimed_for
from recovery.states import delivery, remote_job, run, task
from recovery.states.base import IllegalTransition
from recovery.states.choices import (
    DeliveryState,
    HandoffState,
    RemoteJobState,
    RunState,
    TaskState,
)
from tests.support.factories import force_state, make_run, make_tasks

pytestmark = pytest.mark.django_db


def edges(states, expected):
    return [
        pytest.param(s, t, (s, t) in expected, id=f"{s}->{t}")
        for s, t in itertools.product(states, states)
    ]


# The design's edges, written out independently of recovery.states (DESIGN.md section 2), so a
# move added to or dropped from a machine's table fails here instead of being trusted.
_TASK_OUTCOMES = {"committed", "retry_wait", "quarantined", "gone", "dead"}
TASK_EDGES = {
    ("pending", "leased"),
    ("retry_wait", "leased"),
    ("leased", "leased"),  # re-claim after the lease expired
    *(("leased", t) for t in _TASK_OUTCOMES),
    # a provider job takes due tasks, or the worker that claimed them hands them over
    ("pending", "remote"),
    ("retry_wait", "remote"),
    ("leased", "remote"),
    # the job's import decides; an operator's replacement releases them
    *(("remote", t) for t in _TASK_OUTCOMES),
    ("remote", "pending"),
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
# A media handoff: the delivery edges its outbox event takes, then what follows delivery (the
# consumer's acknowledgement, which proves the delivery; the provider's lost object; a paid
# regeneration of it).
_ACKNOWLEDGED = {("sending", "finished"), ("failed", "finished"), ("uncertain", "finished")}
_LOST = {(s, "missing") for s in ("unsent", "sending", "delivered", "failed", "uncertain")}
HANDOFF_EDGES = (
    DELIVERY_EDGES
    | _ACKNOWLEDGED
    | _LOST
    | {("delivered", "finished"), ("finished", "missing"), ("missing", "regenerated")}
)
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
        (delivery.HANDOFF_ALLOWED, HANDOFF_EDGES),
        (remote_job.ALLOWED, REMOTE_JOB_EDGES),
    ],
    ids=["task", "run", "delivery", "handoff", "remote_job"],
)
def test_each_machine_allows_exactly_the_designed_edges(allowed, expected):
    assert {(s, t) for s, targets in allowed.items() for t in targets} == expected


def test_every_state_has_an_entry_in_its_table():
    for choices, allowed in [
        (TaskState, task.ALLOWED),
        (RunState, run.ALLOWED),
        (DeliveryState, delivery.ALLOWED),
        (HandoffState, delivery.HANDOFF_ALLOWED),
        (RemoteJobState, remote_job.ALLOWED),
    ]:
        assert set(allowed) == set(choices.values)
        for targets in allowed.values():
            assert set(targets) <= set(choices.values)


# --- task ---------------------------------------------------------------------------------
# The task machine has no generic move(): each edge is driven through the door production
# uses (recovery.leases for claim and commit, recovery.states.task for the ORM moves).

# An outcome that sends a task to each target (the retry table decides; "dead" by budget).
_OUTCOME_FOR = {
    "committed": Outcome(http_status=200),
    "retry_wait": Outcome(error_class=ErrorClass.NETWORK, error_detail="reset"),
    "quarantined": Outcome(error_class=ErrorClass.CHALLENGE, http_status=200),
    "gone": Outcome(error_class=ErrorClass.NOT_FOUND, http_status=404),
    "dead": Outcome(error_class=ErrorClass.BUDGET_EXHAUSTED),
}


def task_in(state: str) -> tuple[Task, RemoteJob]:
    """A due task in `state`: leased to w1 (token 7, lease expired) or held by a job."""
    r = make_run()
    (t,) = make_tasks(r, 1, state=TaskState.PENDING, partition="p")
    attempt = Attempt.objects.create(task=t, run=r, outcome=Attempt.Outcome.SUBMITTED)
    job = RemoteJob.objects.create(
        attempt=attempt, run=r, provider="messora", kind="batch", state="submitted"
    )
    past = timezone.now() - timedelta(seconds=5)
    fields = {"next_attempt_at": past, "lease_token": 7}
    if state == TaskState.LEASED:
        fields.update(lease_owner="w1", lease_until=past)
    if state == TaskState.REMOTE:
        fields["remote_job"] = job
    return force_state(t, state, **fields), job


def drive(t: Task, job: RemoteJob, source: str, target: str) -> bool:
    """Ask the production door that makes `target` to move `t` from `source`; True if moved."""
    if target == TaskState.LEASED:
        return t.pk in {c.task_id for c in leases.claim("w2", 10)}
    if target == TaskState.REMOTE:
        fence = {"owner": "w1", "fence": {t.pk: 7}} if source == TaskState.LEASED else {}
        return task.hand_to_job(job, [t.pk], sources=[source], **fence) == [t.pk]
    if target == TaskState.PENDING and source == TaskState.REMOTE:
        return bool(task.release_from_job(job.pk, target))
    if target == TaskState.PENDING:
        return task.reset_for_batch(t.run_id, [t.pk], batch_id=None) == 1
    run_obj = Run.objects.select_related("dataset").get(pk=t.run_id)
    claimed = claimed_for(t, run_obj, job)
    holder = leases.Holder.job(job.pk) if source == TaskState.REMOTE else leases.WORKER
    summary = leases.commit_outcomes("w1", [claimed], [_OUTCOME_FOR[target]], holder=holder)
    return summary.states == {target: 1}


@pytest.mark.parametrize(("source", "target", "allowed"), edges(TaskState.values, TASK_EDGES))
def test_task_edges_through_the_production_doors(source, target, allowed):
    t, job = task_in(source)
    before = counters.by_state(t.run_id)
    try:
        moved = drive(t, job, source, target)
    except IllegalTransition as exc:
        assert not allowed, f"{source} -> {target} refused: {exc}"
        moved = False
    t.refresh_from_db()
    if not allowed:
        assert not moved
        assert t.state == source
        assert counters.by_state(t.run_id) == before
        return
    assert moved
    assert t.state == target
    assert counters.by_state(t.run_id) == {target: 1}
    counters.rebuild(t.run_id)
    assert counters.by_state(t.run_id) == {target: 1}
    # Only a remote task names a job, and only a leased one has a lease.
    assert (t.remote_job_id is not None) == (target == TaskState.REMOTE)
    assert (t.lease_owner != "") == (target == TaskState.LEASED)


def test_the_claim_never_takes_a_remote_task_and_its_index_leaves_them_out():
    task_in(TaskState.REMOTE)
    assert leases.claim("w2", 10) == []
    assert TaskState.REMOTE not in task.CLAIMABLE
    (index,) = [i for i in Task._meta.indexes if i.name == "task_claim_idx"]
    assert set(index.condition.children[0][1]) == set(task.CLAIMABLE)


@pytest.mark.parametrize(("owner", "token"), [("w2", 7), ("w1", 8), ("", 7)])
def test_a_hand_over_out_of_leased_is_fenced_by_the_workers_lease(owner, token):
    t, job = task_in(TaskState.LEASED)
    before = counters.by_state(t.run_id)
    assert task.hand_to_job(job, [t.pk], sources=["leased"], owner=owner, fence={t.pk: token}) == []
    t.refresh_from_db()
    assert (t.state, t.lease_owner, t.lease_token) == (TaskState.LEASED, "w1", 7)
    assert counters.by_state(t.run_id) == before


def test_a_hand_over_out_of_leased_needs_the_lease():
    t, job = task_in(TaskState.LEASED)
    with pytest.raises(IllegalTransition, match="owner and lease tokens"):
        task.hand_to_job(job, [t.pk], sources=["leased"])


@pytest.mark.parametrize("target", sorted(_TASK_OUTCOMES))
def test_an_import_is_fenced_by_the_job_and_the_token(target):
    t, job = task_in(TaskState.REMOTE)
    other = RemoteJob.objects.create(
        attempt=Attempt.objects.create(task=t, run_id=t.run_id, outcome="submitted"),
        run_id=t.run_id,
        provider="messora",
        kind="batch",
    )
    run_obj = Run.objects.select_related("dataset").get(pk=t.run_id)
    stale = claimed_for(t, run_obj, job)
    stale.lease_token = 6
    for holder, claimed in [
        (leases.Holder.job(other.pk), claimed_for(t, run_obj, job)),
        (leases.Holder.job(job.pk), stale),
        (leases.WORKER, claimed_for(t, run_obj, job)),
    ]:
        summary = leases.commit_outcomes("w1", [claimed], [_OUTCOME_FOR[target]], holder=holder)
        assert summary.lost == [t.pk]
    t.refresh_from_db()
    assert (t.state, t.remote_job_id) == (TaskState.REMOTE, job.pk)
    assert not Observation.objects.filter(source_task=t).exists()


def test_a_task_in_remote_must_name_its_job():
    t, _job = task_in(TaskState.PENDING)
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=t.pk).update(state=TaskState.REMOTE)


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


@pytest.mark.parametrize(("source", "target", "allowed"), edges(HandoffState.values, HANDOFF_EDGES))
def test_handoff_edges(source, target, allowed):
    job = make_remote_job(RemoteJobState.COMPLETED, handoff_state=source)
    if not allowed:
        with pytest.raises(IllegalTransition, match=f"{source} -> {target}"):
            delivery.move_handoff(job.pk, source, target)
        assert RemoteJob.objects.get(pk=job.pk).handoff_state == source
        return
    assert delivery.move_handoff(job.pk, source, target) is True
    job.refresh_from_db()
    assert (job.state, job.handoff_state) == (RemoteJobState.COMPLETED, target)
    if source != target:
        assert delivery.move_handoff(job.pk, source, target) is False


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
