"""Finish of the dashboard (issue 11, item 6): error pages with the navigation, a favicon,
admin names, times without microseconds, audit objects as links, and a batch form that offers
only the error classes present in the run, with counts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template.loader import get_template
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.templatetags.dashboard_tags import relative, when
from recovery import audit
from recovery.models import AuditEntry, RecoveryBatch, Task
from recovery.quality import errorclasses
from tests.support.factories import make_tasks
from tests.support.world import logged_in, make_users, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    w = make_world()
    w.users = make_users()
    return w


_client = logged_in


def test_error_pages_keep_the_navigation_and_say_what_happened(world):
    operator = _client(world, "operator")
    missing = operator.get("/runs/999999/")
    assert missing.status_code == 404
    assert b"404 \xc2\xb7 Not found" in missing.content
    assert b'href="/runs/"' in missing.content  # the navigation is there
    refused = _client(world, "exporter").get("/runs/")
    assert refused.status_code == 403
    assert b"403 \xc2\xb7 Not allowed" in refused.content and b'href="/exports/"' in refused.content
    bad = operator.get("/runs/", {"after": "[1, 2, 3]"})
    assert bad.status_code == 400
    assert b"does not match this list&#x27;s order" in bad.content
    assert b'href="/runs/"' in bad.content
    assert "500" in get_template("500.html").render({})


def test_the_favicon_is_served(world):
    """It was a permanent redirect to the hashed file, cached by browsers past the release."""
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert b"<svg" in response.content


def test_a_405_is_the_styled_page_with_the_navigation(world):
    """A GET on a POST-only action answered an empty, unstyled body."""
    url = reverse("dashboard:add_note", kwargs={"run_id": world.run.pk})
    response = _client(world, "operator").get(url)
    assert response.status_code == 405
    assert "POST" in response["Allow"]
    assert b"405 \xc2\xb7 Method not allowed" in response.content
    assert b'href="/runs/"' in response.content  # the navigation is there


def test_the_admin_names_audit_entries_and_recovery_batches(world):
    assert str(AuditEntry._meta.verbose_name_plural) == "audit entries"
    assert str(RecoveryBatch._meta.verbose_name_plural) == "recovery batches"
    world.users["admin"].is_staff = world.users["admin"].is_superuser = True
    world.users["admin"].save()
    page = _client(world, "admin").get(reverse("admin:index"))
    assert b"Audit entries" in page.content and b"Recovery batches" in page.content
    assert b"entrys" not in page.content and b"batchs" not in page.content


def test_times_are_relative_with_the_absolute_time_to_the_second_on_hover():
    at = timezone.now().replace(microsecond=123456) - timedelta(minutes=5)
    html = str(when(at))
    assert ">5 min ago</time>" in html and "123456" not in html and ".123" not in html
    assert f'title="{timezone.localtime(at):%Y-%m-%d %H:%M:%S}' in html
    assert relative(0) == "just now"
    assert relative(45) == "45 s ago"
    assert relative(-600) == "in 10 min"
    assert relative(3 * 3600) == "3 h ago"
    assert relative(5 * 86400) == "5 days ago"


def test_audit_objects_link_to_their_pages(world):
    audit.record("adam", "accept_run", world.run, "")
    audit.record("adam", "remote_dismiss", world.job, "r")
    page = _client(world, "admin").get(reverse("dashboard:audit")).content.decode()
    assert f'href="/runs/{world.run.pk}/">{world.run.pk}</a>' in page
    assert f'href="/reconcile/?state=any&amp;job={world.job.pk}">{world.job.pk}</a>' in page


def test_the_batch_form_offers_the_error_classes_present_with_counts(world, monkeypatch):
    make_tasks(world.run, 3, partition="alpha.test", state="dead", host="d.test")
    Task.objects.filter(run=world.run, state="dead").update(last_error_class="server_error")
    # A class on a task still pending is present but nothing a batch could reset yet.
    pending = make_tasks(world.run, 1, partition="alpha.test", state="pending", host="p.test")
    Task.objects.filter(pk=pending[0].pk).update(last_error_class="network")

    assert errorclasses.classes(world.run.pk) == ["network", "selector_failure", "server_error"]
    page = _client(world, "admin").get(reverse("dashboard:quarantine", args=[world.run.pk]))
    (field,) = [f for f in page.context["batch_choices"] if f["name"] == "error_classes"]
    assert [(value, label) for value, label, _ in field["options"]] == [
        ("selector_failure", "selector_failure (4)"),
        ("server_error", "server_error (3)"),
    ]
    monkeypatch.setattr(errorclasses, "COUNT_CAP", 2)
    labels = [p.label for p in errorclasses.present(world.run.pk)]
    assert labels == ["selector_failure (2 or more)", "server_error (2 or more)"]
