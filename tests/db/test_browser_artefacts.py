"""Screenshots of failed rendered pages: stored once, served only as PNG, only to viewers.

The role matrix for the screenshot URL is in test_dashboard_permissions (every dashboard URL
is); here: what is served, what is refused, and that the task and quarantine pages show it.
"""

from __future__ import annotations

import asyncio

import pytest
from django.urls import reverse

from recovery import failures, keys, leases
from recovery.fetch import artefacts
from recovery.models import Attempt, Task
from recovery.outcomes import ErrorClass, Observed, Outcome, TaskInput
from recovery.providers.browser import BrowserProvider
from tests.support.browser_provider import screenshot_attempt, tiny_png
from tests.support.factories import make_run, make_tasks
from tests.support.world import logged_in, make_users, make_world


@pytest.fixture
def world(db, settings, tmp_path):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    w = make_world()
    w.users = make_users()
    return w


_client = logged_in


def _url(attempt: Attempt) -> str:
    return reverse(
        "dashboard:attempt_screenshot",
        kwargs={"task_id": attempt.task_id, "attempt_id": attempt.pk},
    )


def test_it_stores_a_screenshot_once_under_its_content_hash(settings, tmp_path):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path
    png = tiny_png()
    first, second = artefacts.store(png, "png"), artefacts.store(png, "png")
    assert first == second and keys.valid_artefact_name(first, "png")
    assert artefacts.read_screenshot(first) == png
    assert [p.name for p in tmp_path.iterdir()] == [first]  # no temporary file left


def test_it_serves_the_png_to_a_viewer_and_never_as_a_document(world):
    png = tiny_png(3, 3)
    attempt = screenshot_attempt(world.quarantined_task, png)
    for role in ("operator", "admin"):
        response = _client(world, role).get(_url(attempt))
        assert response.status_code == 200
        assert response["Content-Type"] == "image/png"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert "sandbox" in response["Content-Security-Policy"]
        assert response.content == png
    for role in ("exporter", "nobody"):
        assert _client(world, role).get(_url(attempt)).status_code == 403


def test_it_refuses_a_file_that_is_not_a_png_whatever_its_name(world, settings):
    # A stored file named like a screenshot but holding a script: never handed to a browser.
    name = artefacts.store(b"<html><script>alert(1)</script></html>", "png")
    attempt = screenshot_attempt(world.quarantined_task)
    Attempt.objects.filter(pk=attempt.pk).update(artefact={"screenshot": name})
    response = _client(world, "operator").get(_url(attempt))
    assert response.status_code == 404
    assert b"<script>" not in response.content


def test_it_refuses_names_that_are_not_content_hashes(world):
    attempt = screenshot_attempt(world.quarantined_task)
    Attempt.objects.filter(pk=attempt.pk).update(artefact={"screenshot": "../../etc/passwd"})
    assert _client(world, "operator").get(_url(attempt)).status_code == 404
    # ... and the engine never stores such a name in the first place.
    assert "screenshot" not in failures.sanitise_artefact({"screenshot": "../x.png"})


def test_it_serves_a_screenshot_only_under_its_own_task(world):
    attempt = screenshot_attempt(world.quarantined_task)
    other = world.run.tasks.exclude(pk=attempt.task_id).first()
    url = reverse(
        "dashboard:attempt_screenshot", kwargs={"task_id": other.pk, "attempt_id": attempt.pk}
    )
    assert _client(world, "operator").get(url).status_code == 404


def test_the_task_and_quarantine_pages_show_the_screenshot_next_to_the_error(world):
    task = world.quarantined_task
    # Its own error class, so it is that class's sample on the quarantine page.
    Task.objects.filter(pk=task.pk).update(last_error_class="wrong_template")
    attempt = screenshot_attempt(task, refused=["GET http://10.0.0.1/x: refused 10.0.0.1"])
    client = _client(world, "operator")
    pages = [
        reverse("dashboard:task", kwargs={"task_id": task.pk}),
        reverse("dashboard:quarantine", kwargs={"run_id": task.run_id})
        + f"?partition={task.partition}",
    ]
    task_page = client.get(pages[0]).content.decode()
    assert f'<img class="screenshot" src="{_url(attempt)}"' in task_page
    assert "expected template not found" in task_page
    assert "refused by outbound safety" in task_page
    quarantine_page = client.get(pages[1]).content.decode()
    assert f"task #{task.pk}<" in quarantine_page
    assert f'<img class="screenshot" src="{_url(attempt)}"' in quarantine_page


def test_a_committed_attempt_keeps_the_refused_requests_of_its_page(db):
    run = make_run()
    make_tasks(run, 1)
    claimed = leases.claim("w-refused", 1)
    refused = ["GET http://127.0.0.1:6379/x: refused 127.0.0.1: loopback (port 6379 not allowed)"]
    outcome = Outcome(
        http_status=200,
        observations=[Observed("SKU-1", {"price": "1.00"})],
        artefact={"refused": refused, "cookie": "never stored"},
    )
    summary = leases.commit_outcomes("w-refused", claimed, [outcome])
    assert summary.states == {"committed": 1}
    (attempt,) = Attempt.objects.filter(run=run)
    assert attempt.outcome == "committed"
    assert attempt.artefact == {"refused": refused}


def test_a_missing_browser_is_an_internal_error_naming_what_to_install(settings):
    settings.SALVAGE_CHROMIUM = "/nonexistent/chromium"
    provider = BrowserProvider()
    task = TaskInput(
        task_id=1, task_key="k", run_id=1, url="http://127.0.0.1:9/", page_type="product",
        partition="p", window="w", dataset="d", attempt_count=1, lease_token=1,
        # Nothing listens on port 9, so robots.txt (read before the browser starts) would
        # end the task as a network failure first: this dataset opts out, with its reason.
        spec={"page_types": {"product": {}},
              "robots": {"obey": False, "reason": "the browser launch is under test"}},
    )  # fmt: skip
    (outcome,) = asyncio.run(provider.execute_many([task]))
    assert outcome.error_class == ErrorClass.INTERNAL
    assert "no Chromium at /nonexistent/chromium" in outcome.error_detail
    assert "apt-get install chromium" in outcome.error_detail
