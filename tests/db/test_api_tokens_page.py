"""The API tokens page and the exporter's home: a token is shown once and stored as a hash,
revoked after a confirmation, admins manage everyone's; the home lists what the user may read
with commands that work."""

from __future__ import annotations

import hashlib
import os
import re

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from recovery.consumers import tokens
from recovery.consumers.models import ApiToken
from recovery.models import AuditEntry
from recovery.quality import acceptance
from tests.support.acceptance import make_collected_run
from tests.support.world import make_user

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def made_token(response) -> str:
    found = re.search(rb"<pre class=\"commands\" data-token>(slv_[^<]+)</pre>", response.content)
    assert found, response.content[:2000]
    return found.group(1).decode()


def test_an_exporter_makes_a_token_shown_once_and_stored_as_a_hash():
    erin = make_user("erin", "exporter")
    client = logged_in(erin)
    response = client.post(
        reverse("dashboard:api_token_create"),
        {"name": "warehouse", "days": "30", "all_datasets": "on"},
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    secret = made_token(response)
    token = ApiToken.objects.get(name="warehouse")
    assert token.user == erin and token.all_datasets
    assert token.token_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert secret.startswith(f"slv_{token.prefix}_")
    stored = [str(v) for v in ApiToken.objects.values().get()] + [
        str(e.detail) for e in AuditEntry.objects.all()
    ]
    assert not any(secret in value for value in stored)
    assert AuditEntry.objects.get(action="api_token_created").detail["prefix"] == token.prefix
    page = client.get(reverse("dashboard:api_tokens"))
    assert secret.encode() not in page.content  # never shown again
    assert f"slv_{token.prefix}_".encode() in page.content
    # The token reads the API.
    api = Client().get("/api/v1/datasets", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.status_code == 200


def test_a_token_is_scoped_and_expires_within_the_limit(settings):
    settings.SALVAGE_API_TOKEN_MAX_DAYS = 30
    erin = make_user("erin", "exporter")
    run = make_collected_run({"a": "good"}, per_partition=1)
    client = logged_in(erin)
    refused = client.post(
        reverse("dashboard:api_token_create"), {"name": "long", "days": "31", "all_datasets": "on"}
    )
    assert b"a token lives 1 to 30 days" in refused.content
    assert not ApiToken.objects.exists()
    response = client.post(
        reverse("dashboard:api_token_create"),
        {"name": "one", "days": "30", "datasets": [run.dataset.name]},
    )
    token = ApiToken.objects.get(name="one")
    assert not token.all_datasets
    assert [ds.name for ds in token.datasets.all()] == [run.dataset.name]
    assert made_token(response)


def test_revoking_takes_a_confirmation_and_only_admins_revoke_other_peoples(client):
    erin, edna = make_user("erin", "exporter"), make_user("edna", "exporter")
    adam = make_user("adam", "admin")
    mine = tokens.create_token(erin.pk, name="a", datasets=None, days=5, actor="erin").token
    hers = tokens.create_token(edna.pk, name="b", datasets=None, days=5, actor="edna").token
    as_erin = logged_in(erin)
    url = reverse("dashboard:api_token_revoke", kwargs={"token_id": mine.pk})
    page = as_erin.post(url)
    assert b"Yes, revoke it" in page.content
    mine.refresh_from_db()
    assert mine.revoked_at is None  # not without the confirmation
    assert as_erin.post(url, {"confirmed": "1"}).status_code == 302
    mine.refresh_from_db()
    assert mine.revoked_by == "erin"
    other = reverse("dashboard:api_token_revoke", kwargs={"token_id": hers.pk})
    assert as_erin.post(other, {"confirmed": "1"}).status_code == 403
    as_adam = logged_in(adam)
    listing = as_adam.get(reverse("dashboard:api_tokens"))
    assert b"edna" in listing.content and b"erin" in listing.content
    as_adam.post(other, {"confirmed": "1"})
    hers.refresh_from_db()
    assert hers.revoked_by == "adam"
    assert AuditEntry.objects.filter(action="api_token_revoked").count() == 2
    # An admin cannot hold a token (no exporter role), but makes one for an exporter.
    response = as_adam.post(
        reverse("dashboard:api_token_create"),
        {"name": "for edna", "days": "7", "all_datasets": "on", "user": edna.pk},
    )
    assert made_token(response)
    assert ApiToken.objects.get(name="for edna").created_by == "adam"


@pytest.mark.django_db(transaction=True)
def test_the_exporters_home_lists_datasets_with_commands_that_work(live_server, settings, tmp_path):
    settings.SALVAGE_EXPORT_CACHE_DIR = tmp_path / "cache"
    run = make_collected_run({"a": "good"}, per_partition=3)
    acceptance.advance_runs()
    acceptance.accept_run(run.pk, "admin")
    acceptance.publish_run(run.pk, "admin")
    erin = make_user("erin", "exporter")
    client = logged_in(erin)
    home = client.get(reverse("dashboard:home"), follow=True)
    assert home.redirect_chain[-1][0] == reverse("dashboard:data_home")
    text = home.content.decode()
    section = text.split(f'id="dataset-{run.dataset.name}"')[1]
    assert "<dd data-rows>3</dd>" in section
    assert "<dd data-version>" in section and "Published" in section
    assert f"/api/v1/datasets/{run.dataset.name}/current.parquet" in section
    python = re.search(r"<pre class=\"commands\" data-python>(.*?)</pre>", section, re.S)
    assert python
    import html

    lines = html.unescape(python.group(1)).strip().splitlines()
    assert len(lines) == 3
    secret = tokens.create_token(erin.pk, name="t", datasets=None, days=1, actor="erin").secret
    code = "\n".join(lines).replace("http://testserver", live_server.url)
    scope: dict = {}
    os.environ["TOKEN"] = secret
    try:
        exec(code, scope)  # the page's three lines, as a user would paste them
    finally:
        del os.environ["TOKEN"]
    assert scope["table"].num_rows == 3
    curl = re.search(r"<pre class=\"commands\" data-curl>(.*?)</pre>", section, re.S)
    assert curl and "Authorization: Bearer $TOKEN" in html.unescape(curl.group(1))
    csv_url = f"{live_server.url}/api/v1/datasets/{run.dataset.name}/current.csv"
    answer = httpx.get(csv_url, headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 200 and len(answer.text.splitlines()) == 4
