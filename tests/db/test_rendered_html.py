"""The rendered HTML of a failed browser page: opened from the task page, as inert text, only
for the roles that see its screenshot (the full role matrix is test_dashboard_permissions')."""

from __future__ import annotations

import pytest
from django.urls import reverse

from recovery.fetch import artefacts
from recovery.models import Attempt
from tests.support.browser_provider import screenshot_attempt
from tests.support.world import logged_in, make_users, make_world

HOSTILE = (
    "<html><head><script>document.title = 'ran'; fetch('/audit/')</script></head>"
    '<body><div class="product"><h1>Café: 100 €</h1>'
    '<img src=x onerror="alert(1)"></div></body></html>'
)


@pytest.fixture
def world(db, settings, tmp_path):
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    w = make_world()
    w.users = make_users()
    return w


def html_attempt(task, html: str | bytes = HOSTILE) -> Attempt:
    data = html.encode() if isinstance(html, str) else html
    return screenshot_attempt(task, rendered_html=artefacts.store(data, "html"))


def _url(attempt: Attempt, task_id: int | None = None) -> str:
    return reverse(
        "dashboard:attempt_rendered_html",
        kwargs={"task_id": task_id or attempt.task_id, "attempt_id": attempt.pk},
    )


def test_the_task_page_links_the_rendered_html(world):
    attempt = html_attempt(world.quarantined_task)
    page = logged_in(world, "operator").get(
        reverse("dashboard:task", kwargs={"task_id": attempt.task_id})
    )
    assert f'<a class="rendered-html" href="{_url(attempt)}">' in page.content.decode()


def test_it_serves_the_html_as_inert_text_to_the_roles_that_see_the_screenshot(world):
    attempt = html_attempt(world.quarantined_task)
    for role in ("operator", "admin"):
        response = logged_in(world, role).get(_url(attempt))
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response["Content-Disposition"].startswith("inline;")
        assert response["X-Content-Type-Options"] == "nosniff"
        assert "sandbox" in response["Content-Security-Policy"]
        assert "default-src 'none'" in response["Content-Security-Policy"]
        # The page's own bytes, the script included, as text: a browser shows it, never runs it.
        assert response.content.decode("utf-8") == HOSTILE
    for role in ("exporter", "nobody"):
        assert logged_in(world, role).get(_url(attempt)).status_code == 403


def test_it_refuses_names_that_are_not_stored_html_and_other_tasks(world):
    attempt = html_attempt(world.quarantined_task)
    other = world.run.tasks.exclude(pk=attempt.task_id).first()
    client = logged_in(world, "operator")
    assert client.get(_url(attempt, task_id=other.pk)).status_code == 404
    for name in ("../../etc/passwd", attempt.artefact["screenshot"], "0" * 64 + ".html"):
        Attempt.objects.filter(pk=attempt.pk).update(artefact={"rendered_html": name})
        assert client.get(_url(attempt)).status_code == 404


def test_html_cut_inside_a_character_is_still_served_as_utf8_text(world):
    cut = "<p>100 €</p>".encode()[:-6]  # the provider caps bytes, maybe mid-character
    attempt = html_attempt(world.quarantined_task, cut)
    response = logged_in(world, "operator").get(_url(attempt))
    assert response.content.decode("utf-8") == "<p>100 \ufffd"
