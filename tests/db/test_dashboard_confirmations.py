"""Consequential actions go through a confirmation page; only its own POST acts.

Accept, Reject, Publish, Dismiss, Replace and a recovery batch: a GET or a POST without the
confirmation step shows what would happen and changes nothing (on SQLite and PostgreSQL);
the confirmed POST acts and is audited; Accept is disabled, naming the failing rules, while
the run cannot be accepted.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from recovery.models import AuditEntry, RecoveryBatch, Run, ValidationResult
from recovery.quality import confirmations
from tests.db.test_dashboard_permissions import POSTS, snapshot
from tests.support.factories import make_run
from tests.support.held_rows import held_run
from tests.support.world import logged_in, make_users, make_world

CONFIRMED = [
    "dashboard:run_accept",
    "dashboard:run_reject",
    "dashboard:run_publish",
    "dashboard:reconcile_replace",
    "dashboard:reconcile_dismiss",
    "dashboard:create_batch",
]


@pytest.fixture
def world(db):
    users = make_users()
    w = make_world()
    w.users = users
    return w


_client = logged_in


def _role(name: str) -> str:
    return sorted(POSTS[name].allowed)[0]


@pytest.mark.parametrize("name", CONFIRMED)
def test_it_changes_nothing_on_a_post_without_the_confirmation_step(world, name):
    post = POSTS[name]
    data = {k: v for k, v in post.data.items() if k != "confirmed"}
    before = snapshot()
    response = _client(world, _role(name)).post(reverse(name, kwargs=post.kwargs(world)), data)
    assert response.status_code == 200
    assert b'name="confirmed" value="1"' in response.content
    assert snapshot() == before
    assert not post.happened(world)


@pytest.mark.parametrize("name", CONFIRMED)
def test_it_acts_on_the_confirmed_post_and_audits_it(world, name):
    post = POSTS[name]
    before = AuditEntry.objects.count()
    response = _client(world, _role(name)).post(
        reverse(name, kwargs=post.kwargs(world)), post.data, follow=True
    )
    assert [str(m) for m in response.context["messages"] if m.level_tag == "error"] == []
    assert post.happened(world)
    entry = AuditEntry.objects.order_by("-pk").first()
    assert AuditEntry.objects.count() > before
    assert entry.actor == world.users[_role(name)].username


def test_it_states_what_accepting_does(world):
    response = _client(world, "admin").get(
        reverse("dashboard:run_accept", kwargs={"run_id": world.candidate.pk})
    )
    text = response.content.decode()
    assert f"become the current dataset shop, replacing run #{world.accepted.pk}" in text
    assert "An &#x27;accepted&#x27; event is written to the outbox" in text
    assert 'name="confirm">Yes, accept run' in text
    assert "disabled" not in text.split('name="confirm"')[1].split(">")[0]


def test_it_states_that_a_replacement_is_a_new_paid_job(world):
    response = _client(world, "operator").get(
        reverse("dashboard:reconcile_replace", kwargs={"job_id": world.job.pk})
    )
    text = response.content.decode()
    assert "A new messora batch job is submitted for the 1 task" in text
    assert "a new paid provider job" in text
    dismiss = _client(world, "operator").get(
        reverse("dashboard:reconcile_dismiss", kwargs={"job_id": world.job.pk})
    )
    assert "end dead" in dismiss.content.decode()


def test_it_keeps_the_reason_typed_before_the_confirmation(world):
    url = reverse("dashboard:run_reject", kwargs={"run_id": world.candidate.pk})
    response = _client(world, "admin").post(url, {"reason": "prices look wrong"})
    assert b"prices look wrong</textarea>" in response.content
    assert Run.objects.get(pk=world.candidate.pk).acceptance_state == "candidate"
    # Confirmed without a reason: the page again, with the error, and nothing changed.
    again = _client(world, "admin").post(url, {"confirmed": "1", "reason": " "})
    assert again.status_code == 200
    assert Run.objects.get(pk=world.candidate.pk).acceptance_state == "candidate"


def test_it_disables_accept_and_names_the_failing_rules(world):
    spec = dict(world.candidate.dataset.spec)
    spec["rules"] = [{"name": "coverage", "kind": "coverage", "min": 0.9}]
    world.candidate.dataset.spec = spec
    world.candidate.dataset.save()
    ValidationResult.objects.create(
        run=world.candidate,
        rule="coverage",
        partition="",
        passed=False,
        value=0.754,
        threshold=0.9,
        detail={"valid": 754, "tasks": 1000},
    )
    client = _client(world, "admin")
    run_page = client.get(reverse("dashboard:run", kwargs={"run_id": world.candidate.pk}))
    text = run_page.content.decode()
    assert '<button type="button" name="accept" disabled>Accept run</button>' in text
    assert "Cannot accept: coverage 0.754, needs ≥ 0.90." in text
    assert reverse("dashboard:run_accept", kwargs={"run_id": world.candidate.pk}) not in text
    # Side by side: committed coverage and the rule's value with its minimum.
    assert "100.0% (2 of 2 tasks committed)" in text
    assert "75.4%, needs ≥ 90.0%" in text

    url = reverse("dashboard:run_accept", kwargs={"run_id": world.candidate.pk})
    confirm = client.get(url).content.decode()
    assert "fails coverage 0.754, needs ≥ 0.90" in confirm
    assert 'name="confirm" disabled' in confirm
    # Forged past the disabled button: the engine refuses, and nothing changes.
    before = snapshot()
    response = client.post(url, {"confirmed": "1"}, follow=True)
    errors = [str(m) for m in response.context["messages"] if m.level_tag == "error"]
    assert errors and "fails its rules: coverage 0.000, needs ≥ 0.90" in errors[0]
    assert snapshot() == before


def test_the_confirmations_count_a_quarantined_partitions_rows_as_held(db):
    run = make_run(acceptance_state="candidate")
    held_run(run)
    effects = confirmations.accept(run).effects
    assert effects[0].startswith(f"2 valid rows of run #{run.pk} become the current dataset")
    assert effects[1] == "Left out: 3 held rows (in 1 quarantined partition) and 1 invalid row."
    Run.objects.filter(pk=run.pk).update(acceptance_state="accepted")
    run.refresh_from_db()
    assert confirmations.publish(run).effects[0].startswith(f"The 2 valid rows of run #{run.pk}")


def test_it_says_what_accepting_and_rejecting_replace_in_both_cases(db):
    """Accept read "... become the current dataset demo-shop, replacing dataset demo-shop has
    no other accepted run." on a dataset's first candidate."""
    first = make_run(acceptance_state="candidate")
    name = first.dataset.name
    accept = confirmations.accept(first).effects[0]
    assert accept == (
        f"0 valid rows of run #{first.pk} become the current dataset {name} "
        f"(dataset {name} has no other accepted run to replace)."
    )
    assert confirmations.reject(first).effects[1] == (
        f"Dataset {name} stays without a current run: it has no other accepted run."
    )
    accepted = make_run(first.dataset, window="2026-10-01", acceptance_state="accepted")
    replacing = f"replacing run #{accepted.pk} (window 2026-10-01, accepted)."
    assert confirmations.accept(first).effects[0].endswith(replacing)
    assert confirmations.reject(first).effects[1] == (
        f"The current dataset {name} stays run #{accepted.pk} (window 2026-10-01, accepted)."
    )


def test_it_names_a_remote_job_and_says_when_a_batch_was_created(world):
    """The Replace page said "RemoteJob object (3)"; a batch "Created admin at 11 s ago"."""
    response = _client(world, "operator").get(
        reverse("dashboard:reconcile_replace", kwargs={"job_id": world.job.pk})
    )
    text = response.content.decode()
    assert "RemoteJob object" not in text
    assert f"remote job #{world.job.pk} (messora batch, run #{world.job.run_id})" in text
    batch = RecoveryBatch.objects.create(
        run=world.run, selection={}, reason="r", scraper_version="2", created_by="adam"
    )
    page = _client(world, "operator").get(reverse("dashboard:batch", kwargs={"batch_id": batch.pk}))
    html = page.content.decode()
    assert "<dt>Created</dt><dd>by adam, <time" in html
    assert " at <time" not in html
