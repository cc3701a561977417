"""The quarantine page's data (recovery.quality.quarantine.page) and the page that renders it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from recovery.models import RecoveryBatch, TriageNote
from recovery.quality import quarantine
from recovery.states.choices import TaskState
from tests.support.world import logged_in, make_users, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    w = make_world()
    w.users = make_users()
    return w


def test_it_lists_flagged_partitions_first_then_by_quarantined_tasks(world):
    page = quarantine.page(world.run, TaskState.QUARANTINED)
    # beta.test is flagged; gamma.test only holds quarantined tasks; alpha.test holds none.
    assert [(p.name, p.flagged, p.quarantined) for p in page.partitions] == [
        ("beta.test", True, 2),
        ("gamma.test", False, 2),
    ]
    assert page.partitions[0].flag.quarantine_reason == "selector failures"


def test_it_groups_the_chosen_state_by_error_class(world):
    page = quarantine.page(world.run, TaskState.QUARANTINED)
    (group,) = page.groups
    assert (group.error_class, group.tasks) == ("selector_failure", 4)
    assert group.partitions == {"beta.test": 2, "gamma.test": 2}
    assert not page.capped and page.sample_cap == quarantine.SAMPLE_CAP
    assert quarantine.page(world.run, TaskState.DEAD).groups == []


def test_it_offers_what_a_batch_can_select_with_the_flagged_partitions_chosen(world):
    options = quarantine.page(world.run, TaskState.QUARANTINED).batch_options
    assert options.partitions == ["alpha.test", "beta.test", "gamma.test"]
    assert options.page_types == ["listing", "product"]
    assert [c.label for c in options.error_classes] == ["selector_failure (4)"]
    assert options.flagged == ["beta.test"]


def test_it_shows_recent_batches_with_their_outcome_and_notes(world):
    batch = RecoveryBatch.objects.create(
        run=world.run, selection={"partitions": ["beta.test"]}, reason="r", scraper_version="2"
    )
    TriageNote.objects.create(run=world.run, author="olivia", text="selector changed")
    page = quarantine.page(world.run, TaskState.QUARANTINED)
    assert [row.batch.pk for row in page.batches] == [batch.pk]
    assert page.batches[0].outcome.state == batch.state
    assert [n.text for n in page.notes] == ["selector changed"]

    response = logged_in(world, "operator").get(
        reverse("dashboard:quarantine", args=[world.run.pk])
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="/batches/{batch.pk}/">#{batch.pk}</a>' in html
    assert f'class="badge tone-{page.batches[0].outcome.tone}"' in html
    assert "selector changed" in html


def test_the_batch_form_starts_from_the_current_version_with_nothing_ticked(world):
    """Right after version 2 was loaded the form said "Scraper version 1", and the flagged
    partition was ticked in advance, so ticking only an error class silently ANDed both."""
    world.run.dataset.spec = dict(world.run.dataset.spec, scraper_version="2")
    world.run.dataset.save()
    world.run.__class__.objects.filter(pk=world.run.pk).update(scraper_version="1")
    client = logged_in(world, "admin")
    html = client.get(reverse("dashboard:quarantine", args=[world.run.pk])).content.decode()
    form = html.split('id="batch-form"')[1].split("</form>")[0]
    assert 'name="scraper_version" value="2"' in form
    assert " checked" not in form
    assert 'value="beta.test"> beta.test (flagged)</label>' in form
    assert "matches every kind you tick" in form
    confirm = client.post(
        reverse("dashboard:create_batch", args=[world.run.pk]),
        {
            "partitions": ["beta.test"],
            "error_classes": ["selector_failure"],
            "reason": "r",
            "scraper_version": "2",
        },
    ).content.decode()
    assert "with AND: a task is reset only if it matches every line above" in confirm


def test_the_batch_form_can_re_extract_from_the_archive_and_the_batch_page_counts_it(world):
    client = logged_in(world, "admin")
    url = reverse("dashboard:create_batch", args=[world.run.pk])
    data = {"error_classes": ["selector_failure"], "reason": "r", "scraper_version": "2"}
    confirm = client.post(url, {**data, "from_archive": "1"}).content.decode()
    assert "re-extracted from the page archive, with no request to the site" in confirm
    assert '<input type="hidden" name="from_archive" value="1">' in confirm
    response = client.post(
        url, {**data, "from_archive": "1", "expected_tasks": "4", "confirmed": "1"}
    )
    batch = RecoveryBatch.objects.get(run=world.run)
    assert response.status_code == 302 and batch.from_archive and batch.task_count == 4
    page = client.get(reverse("dashboard:batch", args=[batch.pk])).content.decode()
    # No task has run yet: none from the archive, none fetched.
    assert '<span id="batch-from-archive">0</span> from the archive' in page
    assert '<span id="batch-fetched">0</span> fetched' in page
    assert "a page the archive no longer holds is fetched" in page
    # Without the box: an ordinary batch, fetched again.
    plain = client.post(url, data).content.decode()
    assert "fetched again from the site" in plain and 'name="from_archive"' not in plain
