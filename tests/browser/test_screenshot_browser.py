"""A failed rendered page's screenshot in headless Chromium: an operator goes from the
quarantine page to the task and sees the image next to the error (loaded under the dashboard's
Content-Security-Policy), and opening it yields a PNG, not a document."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from recovery.models import Task
from tests.support.browser_provider import screenshot_attempt, tiny_png
from tests.support.world import PASSWORD, make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_sees_the_screenshot_next_to_the_error(live_server, page, settings, tmp_path):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    make_users()
    world = make_world()
    task = world.quarantined_task
    Task.objects.filter(pk=task.pk).update(last_error_class="wrong_template")
    screenshot_attempt(task, tiny_png(40, 30))

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "olivia")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/runs/{task.run_id}/quarantine/")
    groups = page.locator("#error-groups")
    expect(groups.locator("img.screenshot")).to_have_count(1)
    groups.get_by_role("link", name=f"task #{task.pk}").click()

    image = page.locator("img.screenshot")
    expect(image).to_be_visible()
    expect(page.get_by_text("expected template not found").first).to_be_visible()
    assert image.evaluate("img => img.complete && img.naturalWidth") == 40
    with page.expect_response(lambda r: r.url.endswith("/screenshot.png")) as shown:
        image.click()
    response = shown.value
    assert response.status == 200
    assert response.headers["content-type"] == "image/png"
    assert response.headers["x-content-type-options"] == "nosniff"
