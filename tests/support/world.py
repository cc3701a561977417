"""A small, complete dashboard world: one user per role and a record for every page.

Used by the server-side permission tests and the browser tests. Scraped fields carry an XSS
payload (a <script> element and a javascript: URL) so every page that shows them is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from recovery import audit, counters
from recovery.models import (
    Attempt,
    Observation,
    OutboxEvent,
    RemoteJob,
    Run,
    RunPartition,
    Task,
    WorkerHeartbeat,
)
from recovery.states import task as task_states
from tests.support.factories import make_dataset, make_observation, make_run, make_tasks

PASSWORD = "correct horse battery staple"
XSS_SCRIPT = "<script>alert('xss')</script>"
XSS_URL = "javascript:alert(1)"
XSS_BODY = f'<html><body>{XSS_SCRIPT}<a href="{XSS_URL}">click</a></body></html>'

SPEC = {
    "name": "shop",
    "provider": "noop",
    "page_types": {
        "product": {"fields": {"title": {"selector": "h1", "required": True}}},
        "listing": {"fields": {}},
    },
    "entity_key": {"from": "url"},
    "partition": {"rule": "host"},
}


@dataclass
class World:
    run: Run  # collecting: quarantine, partitions, batches, reconcile
    candidate: Run  # accept / reject
    accepted: Run  # publish / exports
    quarantined_task: Task
    job: RemoteJob  # unknown: the reconcile queue
    failed_event: OutboxEvent
    uncertain_event: OutboxEvent
    accepted_rows: list[Observation]
    # Filled by the tests that log in (make_users() is separate from make_world()); read by
    # logged_in().
    users: dict[str, User] = field(default_factory=dict)


def make_user(username: str, *roles: str, **extra) -> User:
    user = User.objects.create_user(username, password=PASSWORD, **extra)
    for role in roles:
        user.groups.add(Group.objects.get(name=role))
    return user


def make_users() -> dict[str, User]:
    return {
        "operator": make_user("olivia", "operator"),
        "admin": make_user("adam", "admin"),
        "exporter": make_user("erin", "exporter"),
        "nobody": make_user("nora"),
    }


def make_world() -> World:
    dataset = make_dataset(name="shop", spec=dict(SPEC))
    run = make_run(dataset, window="2026-11-01")
    make_tasks(run, 3, partition="alpha.test", state="committed", host="alpha.test")
    bad = make_tasks(run, 2, partition="beta.test", state="quarantined", host="beta.test")
    make_tasks(run, 2, partition="gamma.test", state="quarantined", host="gamma.test")
    Task.objects.filter(run=run, state="quarantined").update(
        last_error_class="selector_failure", last_http_status=200, attempt_count=1
    )
    RunPartition.objects.create(
        run=run, name="beta.test", quarantined=True, quarantine_reason="selector failures"
    )
    task = bad[0]
    # A scraped URL carrying a payload: shown as text, never as a link.
    Task.objects.filter(pk=task.pk).update(url=f"http://beta.test/{XSS_SCRIPT}?next={XSS_URL}")
    task.refresh_from_db()
    now = timezone.now()
    Attempt.objects.create(
        task=task,
        run=run,
        worker="w-1",
        started_at=now - timedelta(seconds=3),
        finished_at=now - timedelta(seconds=2),
        http_status=200,
        outcome="quarantined",
        error_class="selector_failure",
        error_detail=f"h1 missing {XSS_SCRIPT}",
        artefact={"status": 200, "headers": {"x-note": XSS_SCRIPT}, "body_excerpt": XSS_BODY},
    )
    make_observation(run, make_tasks(run, 1, partition="alpha.test", host="alpha2.test")[0], {})

    # A remote submission whose outcome is unknown: the reconcile queue.
    remote_run = make_run(
        make_dataset(name="remote-shop", spec=dict(SPEC, name="remote-shop"), provider="messora"),
        window="2026-11-01",
    )
    remote_task = make_tasks(remote_run, 1, partition="beta.test", host="beta.test")[0]
    Task.objects.filter(pk=remote_task.pk).update(url=f"http://beta.test/{XSS_SCRIPT}")
    submit = Attempt.objects.create(
        task=remote_task,
        run=remote_run,
        worker="w-2",
        outcome="unknown",
        error_detail="connection reset",
    )
    job = RemoteJob.objects.create(
        attempt=submit,
        run=remote_run,
        provider="messora",
        kind="batch",
        input_ref={"urls": [f"http://beta.test/{XSS_SCRIPT}"]},
        idempotency_key="idem-1",
        state="unknown",
        last_response={"error": XSS_SCRIPT},
    )
    # The job holds its task, as recovery.remote leaves it.
    task_states.hand_to_job(job, [remote_task.pk], sources=["pending"])

    candidate = make_run(dataset, window="2026-11-02")
    make_tasks(candidate, 2, partition="alpha.test", state="committed", host="c.test")
    Run.objects.filter(pk=candidate.pk).update(acceptance_state="candidate", candidate_at=now)
    candidate.refresh_from_db()

    accepted = make_run(dataset, window="2026-10-31")
    done = make_tasks(accepted, 3, partition="alpha.test", state="committed", host="a.test")
    held = make_tasks(accepted, 1, partition="held.test", state="committed", host="h.test")
    rows = [
        make_observation(accepted, done[0], {"title": "Plain kettle"}),
        make_observation(accepted, done[1], {"title": f'{XSS_SCRIPT} =HYPERLINK("{XSS_URL}")'}),
    ]
    make_observation(accepted, done[2], {"title": "invalid one"}, state="invalid")
    # Stored valid, held by its partition's quarantine (quality.row_states): never exported.
    make_observation(accepted, held[0], {"title": "held back"})
    RunPartition.objects.create(run=accepted, name="held.test", quarantined=True)
    Run.objects.filter(pk=accepted.pk).update(
        acceptance_state="accepted", accepted_at=now, accepted_by="adam"
    )
    accepted.refresh_from_db()
    counters.compact(run.pk)

    failed = OutboxEvent.objects.create(
        run=accepted, event_type="accepted", state="failed", last_error="HTTP 503"
    )
    uncertain = OutboxEvent.objects.create(
        run=accepted, event_type="accepted", state="uncertain", last_error="timeout"
    )
    WorkerHeartbeat.objects.create(worker="w-1", hostname="host", pid=1)
    audit.record("system", "seed", run, "test world")
    return World(
        run=run,
        candidate=candidate,
        accepted=accepted,
        quarantined_task=task,
        job=job,
        failed_event=failed,
        uncertain_event=uncertain,
        accepted_rows=rows,
    )


def logged_in(world: World, role: str) -> Client:
    """A test client logged in as the world's user of `role` (operator, admin, exporter)."""
    client = Client()
    client.force_login(world.users[role])
    return client
