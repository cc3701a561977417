"""No secret in any log the web server writes: the demo's gunicorn and the production command.

Both gunicorn commands run as real processes on the test database; the webhook is called with
its secret in the path (right and mistyped), health endpoints with an `api_token` query
parameter, and an error page is provoked. Then every log file they wrote is read: the secrets
are absent, and the access lines for those requests are present (redacted), so the test fails
if the access log stops being written as well as if it leaks.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from recovery.models import WebhookReceipt
from recovery.ops.processes import Supervisor, free_port, http_ok, wait_until
from recovery.showroom import demo
from tests.support.engine_procs import ROOT, child_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

HOOK_SECRET = "hook-secret-do-not-log-4a1f9"
API_TOKEN = "api-token-do-not-log-77c2e"


def production_command() -> list[str]:
    """The web command exactly as docs/production.md documents it."""
    text = (ROOT / "docs" / "production.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| web |"))
    return shlex.split(re.search(r"`(gunicorn [^`]+)`", row).group(1))


def hit_every_secret_path(base: str) -> None:
    form = urllib.parse.urlencode(
        {"scrapingjob_id": "555", "status": "finished", "custom_id": "run-1"}
    ).encode()
    for secret in (HOOK_SECRET, HOOK_SECRET[:-1] + "x"):  # right, then mistyped
        request = urllib.request.Request(f"{base}/hooks/webscraper/{secret}", data=form)
        try:
            urllib.request.urlopen(request, timeout=20).close()
        except urllib.error.HTTPError as exc:
            assert exc.code == 404  # the mistyped one
    for path in ("/healthz", "/readyz", "/no-such-page"):
        with contextlib.suppress(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}{path}?api_token={API_TOKEN}&x=1", timeout=20).close()


def run_web(argv: list[str], tmp_path: Path, name: str, files: tuple[Path, ...] = ()) -> str:
    port = free_port()
    argv = [*argv]
    if "--bind" in argv:
        argv[argv.index("--bind") + 1] = f"127.0.0.1:{port}"
    else:  # the documented command binds $PORT (deploy/gunicorn.conf.py)
        argv += ["--bind", f"127.0.0.1:{port}"]
    env = child_env(WEBSCRAPER_WEBHOOK_SECRET=HOOK_SECRET, WEBSCRAPER_API_TOKEN=API_TOKEN)
    logs = tmp_path / name
    with Supervisor(grace=20, log_dir=logs) as supervisor:
        supervisor.start(name, argv, env=env, cwd=ROOT)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: http_ok(f"{base}/healthz"), timeout=60, what=name)
        hit_every_secret_path(base)
    written = [*sorted(logs.iterdir()), *files]
    text = "\n".join(p.read_text(errors="replace") for p in written)
    assert HOOK_SECRET not in text and HOOK_SECRET[:-1] not in text
    assert API_TOKEN not in text
    # The requests were logged, redacted: a silent access log would pass the checks above.
    assert text.count('"POST /hooks/webscraper/[redacted] HTTP/1.1"') == 2, text[-2000:]
    assert "api_token=[redacted]" in text
    return text


def test_the_demo_web_server_logs_no_secret(tmp_path):
    run_web(demo.gunicorn_command(0), tmp_path, "demo-web")
    assert WebhookReceipt.objects.filter(provider_job_id="555").count() == 1


def test_the_documented_production_command_logs_no_secret(tmp_path):
    argv = production_command()
    assert argv[0] == "gunicorn"
    access, errors = tmp_path / "access.log", tmp_path / "error.log"
    # What an operator adds to keep the logs in files; the logger class is the documented one.
    argv = [sys.executable, "-m", *argv]
    argv += ["--access-logfile", str(access), "--error-logfile", str(errors)]
    run_web(argv, tmp_path, "prod-web", files=(access, errors))
    assert "/hooks/webscraper/[redacted]" in access.read_text()
