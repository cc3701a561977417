"""The demo's checklist ticks from what the database says happened (showroom.demo_story)."""

from __future__ import annotations

import pytest
from django.test import Client

from recovery.delivery import exports
from recovery.models import AuditEntry, Dataset
from recovery.showroom import demo_story
from tests.support.demo import make_demo_candidate
from tests.support.world import make_users

pytestmark = pytest.mark.django_db


def done(story) -> dict[str, bool]:
    return {step.key: step.done for step in story.steps}


def test_with_no_demo_run_it_says_so_and_refuses_the_repair(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    story = demo_story.checklist()
    assert story.run is None and not any(done(story).values())
    with pytest.raises(demo_story.DemoStoryError, match="no demo run"):
        demo_story.load_repaired_spec("adam")


def test_it_ticks_the_candidate_then_the_repaired_spec(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    run = make_demo_candidate(tmp_path)
    story = demo_story.checklist()
    assert done(story) == {
        "collect": True,
        "provisional": False,  # this factory made no observations
        "quarantined": True,
        "repaired_spec": False,
        "batch": False,
        "recovered": False,
        "accepted": False,
        "published": False,
        "exported": False,
    }
    assert story.can_load_repaired_spec
    assert demo_story.load_repaired_spec("adam") == "updated"
    dataset = Dataset.objects.get(name=demo_story.DATASET)
    assert dataset.spec["scraper_version"] == "2"
    price = dataset.spec["page_types"]["product"]["fields"]["price"]["selector"]
    assert ".price-now" in price
    assert AuditEntry.objects.filter(action="demo_load_repaired_spec", actor="adam").exists()
    story = demo_story.checklist()
    assert done(story)["repaired_spec"] and not story.can_load_repaired_spec
    with pytest.raises(demo_story.DemoStoryError, match="loaded already"):
        demo_story.load_repaired_spec("adam")
    assert story.run.pk == run.pk


def test_a_download_is_audited_and_ticks_the_last_step(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    run = make_demo_candidate(tmp_path)
    type(run).objects.filter(pk=run.pk).update(acceptance_state="published")
    "".join(exports.download(run.pk, "csv", "erin"))
    entry = AuditEntry.objects.get(action="export_download")
    assert (entry.actor, entry.object_id, entry.detail) == ("erin", str(run.pk), {"format": "csv"})
    assert done(demo_story.checklist())["exported"]


def test_in_demo_mode_every_role_lands_on_the_checklist(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    make_demo_candidate(tmp_path)
    users = make_users()
    for role in ("operator", "admin", "exporter"):
        client = Client()
        client.force_login(users[role])
        settings.SALVAGE_DEMO = False
        assert client.get("/")["Location"] != "/demo/"
        settings.SALVAGE_DEMO = True
        assert client.get("/")["Location"] == "/demo/"
        page = client.get("/demo/").content.decode()
        assert "2 of 9 steps done" in page
        assert ("Load spec version 2" in page) == (role == "admin")


def test_outside_demo_mode_the_checklist_is_not_found_for_any_role(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.SALVAGE_DEMO = False
    make_demo_candidate(tmp_path)
    users = make_users()
    specs = sorted(Dataset.objects.values_list("name", "spec_sha256"))
    for role in ("operator", "admin", "exporter"):
        client = Client()
        client.force_login(users[role])
        assert client.get("/demo/").status_code == 404
        assert client.post("/demo/repaired-spec").status_code == 404
    assert sorted(Dataset.objects.values_list("name", "spec_sha256")) == specs
    assert not AuditEntry.objects.filter(action="demo_load_repaired_spec").exists()
