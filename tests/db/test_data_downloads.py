"""Who downloads what, and the exporter's home order: exporters every accepted run, an admin
the runs they accepted themselves; what can be downloaded is listed first, and `?accepted=1`
lists only that (issue 29)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from recovery.models import AuditEntry
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run, make_shop
from tests.support.world import make_user

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def accepted_run(name: str, by: str):
    run = make_collected_run({"a": "good"}, per_partition=2, dataset=make_shop(name))
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, by)
    return run


def shown_datasets(response) -> list[str]:
    return re.findall(r'<section class="card" id="dataset-([^"]+)">', response.content.decode())


def test_the_exporters_home_lists_downloadable_datasets_first_and_filters_them(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    for name in ("a-empty", "c-empty"):
        make_shop(name)
    accepted_run("b-accepted", "ada")
    client = logged_in(make_user("erin", "exporter"))

    home = client.get(reverse("dashboard:data_home"))
    assert shown_datasets(home) == ["b-accepted", "a-empty", "c-empty"]

    only = client.get(reverse("dashboard:data_home") + "?accepted=1")
    assert shown_datasets(only) == ["b-accepted"]
    assert b"only those with an accepted run</strong>" in only.content


@pytest.mark.parametrize(
    "query,named", [("?accepted=yes", b"accepted=&#x27;yes&#x27;"), ("?acepted=1", b"acepted")]
)
def test_the_exporters_home_refuses_a_parameter_it_cannot_use(query, named):
    client = logged_in(make_user("erin", "exporter"))
    response = client.get(reverse("dashboard:data_home") + query)
    assert response.status_code == 400
    assert named in response.content


def test_an_admin_downloads_the_runs_they_accepted_and_no_other(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    mine, theirs = accepted_run("mine", "ada"), accepted_run("theirs", "bob")
    ada = make_user("ada", "admin")
    client = logged_in(ada)

    response = client.get(reverse("dashboard:export_download", args=[mine.pk, "csv"]))
    assert response.status_code == 200
    rows = b"".join(response.streaming_content).decode().splitlines()
    assert len(rows) == 1 + 2  # the header and the run's two rows
    entry = AuditEntry.objects.get(action="export_download")
    assert (entry.actor, entry.object_id) == ("ada", str(mine.pk))
    page = client.get(reverse("dashboard:run", args=[mine.pk])).content.decode()
    assert 'id="run-downloads"' in page

    refused = client.get(reverse("dashboard:export_download", args=[theirs.pk, "csv"]))
    assert refused.status_code == 403
    page = client.get(reverse("dashboard:run", args=[theirs.pk])).content.decode()
    assert 'id="run-downloads"' not in page
    assert AuditEntry.objects.filter(action="export_download").count() == 1


def test_operators_still_download_nothing_and_exporters_everything(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    run = accepted_run("shop", "ada")
    url = reverse("dashboard:export_download", args=[run.pk, "jsonl"])
    assert logged_in(make_user("olivia", "operator")).get(url).status_code == 403
    assert logged_in(make_user("erin", "exporter")).get(url).status_code == 200
