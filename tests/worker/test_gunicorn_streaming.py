"""deploy/gunicorn.conf.py lets a long streamed download finish.

With sync workers and the default 30 s timeout, a 100,000-task list CSV stopped at 20,500
rows (WORKER TIMEOUT) and the saved file ended mid-list. Here a download streams for ~10 s
under a 4 s timeout (a gthread worker beats at least once a second, so a loaded box keeps
a margin): with the configuration's gthread workers it arrives whole; with sync
workers and the same timeout it is cut off (so the test can fail), and the client sees the
cut: the response is chunked, and its missing last chunk is an incomplete read.
"""

from __future__ import annotations

import http.client
import sys

import pytest

from recovery.ops.processes import Supervisor, free_port, http_ok, wait_until
from tests.support.engine_procs import ROOT, child_env

pytestmark = [pytest.mark.worker]


def download(extra: list[str], tmp_path, name: str) -> tuple[bytes, bool]:
    """The body received, and whether the client saw it end (its framing complete)."""
    port = free_port()
    argv = [
        sys.executable, "-m", "gunicorn", "--config", "deploy/gunicorn.conf.py",
        "--bind", f"127.0.0.1:{port}", "--workers", "1", "--timeout", "4", *extra,
        "tests.worker.slow_stream_app:app",
    ]  # fmt: skip
    with Supervisor(grace=10, log_dir=tmp_path / name) as supervisor:
        supervisor.start(name, argv, env=child_env(), cwd=ROOT)
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/"), timeout=60, what=name)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/export.csv")
        body, complete, chunked = b"", False, False
        try:
            response = conn.getresponse()
            chunked = response.getheader("Transfer-Encoding") == "chunked"
            body = response.read()
            complete = True
        except http.client.IncompleteRead as exc:
            body = exc.partial
        except (ConnectionError, http.client.HTTPException):
            pass
        finally:
            conn.close()
    assert chunked, "a streamed download is chunked, so a cut one is seen as incomplete"
    return body, complete


def test_a_download_longer_than_the_timeout_arrives_whole(tmp_path):
    body, complete = download([], tmp_path, "gthread")
    assert complete and body.endswith(b"row 19\nend of file\n"), body[-200:]


def test_sync_workers_cut_the_same_download_and_the_client_sees_it_cut(tmp_path):
    body, complete = download(["--worker-class", "sync", "--threads", "1"], tmp_path, "sync")
    assert not body.endswith(b"end of file\n")
    assert not complete, "the cut download's framing was complete: a client could not tell"
    log = (tmp_path / "sync" / "sync.log").read_text()
    assert "WORKER TIMEOUT" in log
