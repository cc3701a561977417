"""The Django admin shows raw records read-only to staff; only superusers may change them."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.urls import reverse

from recovery.models import Observation, Run
from tests.support.factories import make_run
from tests.support.held_rows import held_run
from tests.support.world import make_user, make_world

pytestmark = pytest.mark.django_db


def test_it_registers_every_recovery_and_dashboard_model():
    from django.apps import apps

    missing = [
        m.__name__
        for label in ("recovery", "dashboard")
        for m in apps.get_app_config(label).get_models()
        if m not in admin.site._registry
    ]
    assert missing == []


def test_it_shows_staff_records_read_only(client):
    world = make_world()
    client.force_login(make_user("staffer", "admin", is_staff=True))
    url = reverse("admin:recovery_run_change", args=[world.run.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    response = client.post(url, {"window": "tampered", "dataset": world.run.dataset_id})
    assert response.status_code == 403
    assert Run.objects.get(pk=world.run.pk).window == "2026-11-01"
    assert client.get(reverse("admin:recovery_run_add")).status_code == 403
    delete = client.post(reverse("admin:recovery_run_delete", args=[world.run.pk]), {"post": "yes"})
    assert delete.status_code == 403
    assert Run.objects.filter(pk=world.run.pk).exists()


def test_it_hides_the_audit_log_from_operators_in_the_admin(client):
    make_world()
    client.force_login(make_user("op", "operator", is_staff=True))
    assert client.get(reverse("admin:recovery_task_changelist")).status_code == 200
    assert client.get(reverse("admin:recovery_auditentry_changelist")).status_code == 403


def test_it_lets_superusers_change_records(client):
    world = make_world()
    client.force_login(make_user("root", is_staff=True, is_superuser=True))
    page = client.get(reverse("admin:recovery_run_change", args=[world.run.pk]))
    assert b'name="_save"' in page.content


def _row(page: str, observation: Observation) -> str:
    link = f"/admin/recovery/observation/{observation.pk}/change/"
    rows = [row for row in page.split("<tr") if link in row]
    assert len(rows) == 1, f"observation {observation.pk} is not listed once"
    return rows[0]


def test_it_shows_an_observations_state_as_shown_and_filters_by_the_stored_verdict(client):
    tasks = held_run(make_run())
    held = Observation.objects.get(source_task=tasks["bad"][0])  # stored valid
    valid = Observation.objects.get(source_task=tasks["good"][0])
    client.force_login(make_user("staffer", "admin", is_staff=True))
    url = reverse("admin:recovery_observation_changelist")
    page = client.get(url).content.decode()
    assert re.search(r'class="field-state">\s*held\s*<', _row(page, held))
    assert re.search(r'class="field-state">\s*valid\s*<', _row(page, valid))
    # The filter is the stored verdict, and says so: the held row judged valid is listed
    # among the valid ones.
    assert "By verdict" in page
    filtered = client.get(url, {"validation_state__exact": "valid"}).content.decode()
    assert re.search(r'class="field-state">\s*held\s*<', _row(filtered, held))
