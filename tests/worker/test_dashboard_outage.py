"""A database outage under the web server: every dashboard page answers a styled 503 ("the
database is not answering; this page retries"), and the server logs one line when the outage
begins and one when it ends, instead of a 500 and a traceback per request.

The outage is tests/worker/test_database_outage.py's (the test database refuses connections and
loses every backend of the server); the server is the demo's gunicorn command with one worker
process, so "one line per outage" is exact.
"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest
from django.urls import URLPattern

from recovery.models import Task
from recovery.ops.processes import Supervisor, free_port, http_ok, wait_until
from recovery.showroom import demo
from tests.support.acceptance import make_collected_run
from tests.support.engine_procs import ROOT, child_env
from tests.support.world import make_users
from tests.worker.test_database_outage import database_outage

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

NOTICE = "The database is not answering; this page retries"


def dashboard_paths(run_id: int, task_id: int, dataset: str) -> list[str]:
    """Every page of the dashboard's URL conf (and the login page), ids filled in."""
    from dashboard.urls import urlpatterns

    values = {"run_id": run_id, "task_id": task_id, "name": dataset}
    paths = []
    for pattern in urlpatterns:
        assert isinstance(pattern, URLPattern)
        route = pattern.pattern._route  # type: ignore[attr-defined]
        if pattern.name == "favicon":
            continue  # a static file, no database

        def fill(match: re.Match) -> str:
            kind, name = match.group(1), match.group(2)
            if name in values:
                return str(values[name])
            return str(uuid.uuid4()) if kind == "uuid" else ("1" if kind == "int" else "x")

        paths.append("/" + re.sub(r"<(\w+):(\w+)>", fill, route))
    return paths


class Browser:
    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def get(self, path: str, data: dict | None = None) -> tuple[int, str, dict]:
        body = None
        headers = {}
        if data is not None:
            token = next(c.value for c in self.cookies if c.name == "csrftoken")
            body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": token}).encode()
            headers = {"Referer": self.base + path}
        request = urllib.request.Request(self.base + path, data=body, headers=headers)
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read().decode(errors="replace"), response.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace"), exc.headers

    def log_in(self, username: str, password: str) -> None:
        status, page, _h = self.get("/accounts/login/")
        assert status == 200, page[:500]
        status, page, _h = self.get(
            "/accounts/login/", {"username": username, "password": password}
        )
        assert status == 200 and "Log out" in page, page[:500]


def test_every_dashboard_page_answers_503_during_an_outage_with_one_log_line(
    postgres_only, tmp_path
):
    run = make_collected_run({"a": "good"}, per_partition=2)
    task = Task.objects.filter(run=run).first()
    admin = make_users()["admin"]
    admin.set_password("outage-pw-4c1d")
    admin.save()
    port = free_port()
    argv = demo.gunicorn_command(port)
    argv[argv.index("--workers") + 1] = "1"
    browser = Browser(f"http://127.0.0.1:{port}")
    paths = dashboard_paths(run.pk, task.pk, run.dataset.name)
    assert len(paths) > 40
    with Supervisor(grace=20, log_dir=tmp_path / "logs") as supervisor:
        web = supervisor.start("web", argv, env=child_env(), cwd=ROOT)
        wait_until(lambda: http_ok(f"{browser.base}/healthz"), timeout=60, what="web")
        browser.log_in(admin.username, "outage-pw-4c1d")
        assert browser.get(f"/runs/{run.pk}/")[0] == 200
        with database_outage():
            answers = {path: browser.get(path) for path in paths}
            answers["POST accept"] = browser.get(f"/runs/{run.pk}/accept", {"confirm": "1"})
            # The login form itself needs no database; signing in does.
            anonymous = Browser(browser.base)
            assert anonymous.get("/accounts/login/")[0] == 200
            answers["POST login"] = anonymous.get(
                "/accounts/login/", {"username": admin.username, "password": "outage-pw-4c1d"}
            )
        not_503 = {path: status for path, (status, _p, _h) in answers.items() if status != 503}
        assert not not_503, not_503
        for path, (_status, page, headers) in answers.items():
            assert NOTICE in page, (path, page[:300])
            assert headers["Retry-After"] == "10" and "refresh" in page
            assert 'href="/static/css/' in page  # styled, with our own stylesheet
        # Back: pages answer again, and the end of the outage is one more line.
        wait_until(lambda: browser.get(f"/runs/{run.pk}/")[0] == 200, timeout=30, what="pages back")
        assert web.alive()
    log = (tmp_path / "logs" / "web.log").read_text()
    assert "Traceback" not in log and "Internal Server Error" not in log, log[-3000:]
    assert log.count("web: database unavailable") == 1, log[-3000:]
    assert log.count("web: database available again") == 1, log[-3000:]
    assert "Service Unavailable" not in log  # Django's per-request line for a 503
