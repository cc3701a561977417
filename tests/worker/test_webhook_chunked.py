"""The webhook under gunicorn with chunked bodies (no Content-Length): read, and capped; and a
body cut short of its Content-Length: refused.

Django reads nothing of a body without a Content-Length, so a chunked notification used to be
stored as an empty receipt and a chunked 20 KB body slipped past the 16 KB cap. Raw HTTP over a
socket to the demo's gunicorn command, on the test database.
"""

from __future__ import annotations

import socket

import pytest

from recovery.models import WebhookReceipt
from recovery.ops.processes import Supervisor, free_port, http_ok, wait_until
from recovery.showroom import demo
from tests.support.engine_procs import ROOT, child_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SECRET = "chunked-hook-secret-31f0"


def post_chunked(port: int, body: bytes, chunk: int = 1000) -> int:
    head = (
        f"POST /hooks/webscraper/{SECRET} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + chunk]), body[i : i + chunk])
        for i in range(0, len(body), chunk)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(head + chunks + b"0\r\n\r\n")
        answer = b""
        while data := conn.recv(65536):
            answer += data
    return int(answer.split(b" ", 2)[1])


def test_chunked_notifications_are_read_and_capped(tmp_path):
    port = free_port()
    argv = demo.gunicorn_command(port)
    env = child_env(WEBSCRAPER_WEBHOOK_SECRET=SECRET)
    with Supervisor(grace=20, log_dir=tmp_path / "logs") as supervisor:
        supervisor.start("web", argv, env=env, cwd=ROOT)
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=60, what="web")
        assert post_chunked(port, b"scrapingjob_id=42&status=finished&custom_id=9") == 200
        padding = b"x" * (20 * 1024)
        assert (
            post_chunked(port, b"scrapingjob_id=43&status=finished&sitemap_name=" + padding) == 413
        )
        assert post_chunked(port, b"status=finished") == 400  # read, and found wanting
    receipt = WebhookReceipt.objects.get()
    assert receipt.provider_job_id == "42"
    assert receipt.body == {"scrapingjob_id": "42", "status": "finished", "custom_id": "9"}


def post_truncated(port: int, body: bytes, declared: int) -> int:
    """A client that declares `declared` bytes, sends `body` and stops sending (a dropped
    connection mid-body: gunicorn hands the application what arrived)."""
    head = (
        f"POST /hooks/webscraper/{SECRET} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {declared}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(head + body)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while data := conn.recv(65536):
            answer += data
    return int(answer.split(b" ", 2)[1])


def test_a_body_shorter_than_its_content_length_is_refused(tmp_path):
    port = free_port()
    env = child_env(WEBSCRAPER_WEBHOOK_SECRET=SECRET)
    with Supervisor(grace=20, log_dir=tmp_path / "logs") as supervisor:
        supervisor.start("web", demo.gunicorn_command(port), env=env, cwd=ROOT)
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=60, what="web")
        # Cut inside the last value: what arrived parses as a notification for job 4 (not 42).
        body = b"status=finished&scrapingjob_id=42"
        assert post_truncated(port, body[:-1], declared=len(body)) == 400
        assert post_truncated(port, body, declared=len(body)) == 200
    assert list(WebhookReceipt.objects.values_list("provider_job_id", flat=True)) == ["42"]
