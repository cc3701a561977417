"""Export downloads: streamed, accepted runs only, held and invalid rows never included."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse

from tests.support.world import make_users, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def exporter(client):
    users = make_users()
    client.force_login(users["exporter"])
    return client


def _download(client, run_id: int, fmt: str):
    return client.get(reverse("dashboard:export_download", kwargs={"run_id": run_id, "fmt": fmt}))


def test_it_streams_the_accepted_rows_as_csv_and_jsonl(exporter):
    world = make_world()
    keys = {o.observation_key for o in world.accepted_rows}
    response = _download(exporter, world.accepted.pk, "csv")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment;" in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode()
    assert {r["observation_key"] for r in csv.DictReader(io.StringIO(text))} == keys
    response = _download(exporter, world.accepted.pk, "jsonl")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert {line["observation_key"] for line in lines} == keys
    assert "held back" not in json.dumps(lines)


@pytest.mark.parametrize("which", ["run", "candidate"])
def test_it_refuses_runs_that_are_not_accepted(exporter, which):
    world = make_world()
    assert _download(exporter, getattr(world, which).pk, "csv").status_code == 404


def test_it_refuses_unknown_formats(exporter):
    world = make_world()
    assert _download(exporter, world.accepted.pk, "xlsx").status_code == 404


def test_it_lists_current_and_older_accepted_runs(exporter):
    world = make_world()
    page = exporter.get(reverse("dashboard:exports"))
    rows = {row["dataset"].name: row for row in page.context["rows"]}
    assert rows["shop"]["current"].pk == world.accepted.pk
    assert rows["shop"]["older"] == []
    assert rows["remote-shop"]["current"] is None
