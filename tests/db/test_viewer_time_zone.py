"""Times in the viewer's time zone, a user setting with UTC on hover (issue 29): every page's
dates in the zone the user chose, `when` showing UTC beside it, a zone the server does not know
refused by name with nothing stored, and other users unaffected."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import ViewerSettings
from recovery.models import Task
from tests.support.factories import make_run, make_tasks
from tests.support.world import make_user

pytestmark = pytest.mark.django_db

CREATED = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def shown(client: Client, task: Task) -> str:
    """The hover text of the task page's "state since" time."""
    page = client.get(reverse("dashboard:task", args=[task.pk])).content.decode()
    titles = re.findall(r'<time datetime="2026-12-07T12:00:00\+00:00" title="([^"]+)">', page)
    assert titles, "the task page shows when its state changed through `when`"
    return titles[0]


def test_a_viewer_sees_times_in_their_zone_with_utc_on_hover():
    (task,) = make_tasks(make_run(), 1)
    Task.objects.filter(pk=task.pk).update(state_changed_at=CREATED)
    olivia, oscar = make_user("olivia", "operator"), make_user("oscar", "operator")
    client = logged_in(olivia)

    before = shown(client, task)
    assert before == "2026-12-07 12:00:00 UTC"

    saved = client.post(reverse("dashboard:account_settings"), {"time_zone": "America/New_York"})
    assert saved.status_code == 302
    assert ViewerSettings.objects.get(user=olivia).time_zone == "America/New_York"
    after = shown(client, task)
    assert after == "2026-12-07 07:00:00 EST (2026-12-07 12:00:00 UTC)"

    # Another session of hers reads the stored setting; another user keeps UTC.
    assert shown(logged_in(olivia), task) == after
    assert shown(logged_in(oscar), task) == before


def test_a_zone_the_server_does_not_know_is_refused_by_name_and_nothing_is_stored():
    olivia = make_user("olivia", "operator")
    client = logged_in(olivia)
    client.post(reverse("dashboard:account_settings"), {"time_zone": "Europe/London"})
    response = client.post(reverse("dashboard:account_settings"), {"time_zone": "Mars/Olympus"})
    assert response.status_code == 400
    assert (
        "&#x27;Mars/Olympus&#x27; is not a time zone this server knows" in response.content.decode()
    )
    assert ViewerSettings.objects.get(user=olivia).time_zone == "Europe/London"


@pytest.mark.parametrize("role", ["operator", "admin", "exporter"])
def test_every_role_has_the_settings_page_linked_from_the_top_bar(role):
    client = logged_in(make_user("someone", role))
    page = client.get(reverse("dashboard:account_settings"))
    assert page.status_code == 200
    assert 'id="current-zone">UTC<' in page.content.decode()
    assert f'href="{reverse("dashboard:account_settings")}"' in page.content.decode()


def test_reading_a_page_never_writes_the_session_so_its_expiry_stays_put():
    # A write would move the session's expiry to "now + SESSION_SECONDS" as the page's clock
    # reads it; the zone is copied into the session at log-in instead (viewer_zone.on_login).
    from django.contrib.sessions.models import Session

    olivia = make_user("olivia", "operator")
    ViewerSettings.objects.create(user=olivia, time_zone="Asia/Tokyo")
    client = logged_in(olivia)
    (task,) = make_tasks(make_run(), 1)
    Task.objects.filter(pk=task.pk).update(state_changed_at=CREATED)
    expiry = Session.objects.get().expire_date

    assert shown(client, task) == "2026-12-07 21:00:00 JST (2026-12-07 12:00:00 UTC)"
    assert Session.objects.get().expire_date == expiry
