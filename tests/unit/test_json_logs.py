"""SALVAGE_LOG_FORMAT=json: one JSON object per line, never a configured secret."""

from __future__ import annotations

import json
import logging

from recovery.ops.logs import JsonFormatter, RedactSecretsFilter


def test_it_writes_json_lines_without_configured_secrets(settings):
    settings.MESSORA_API_KEY = "messora-secret-value-123"
    settings.WEBSCRAPER_API_TOKEN = "cloud-token-value-456"
    settings.SALVAGE_METRICS_TOKEN = "metrics-token-value-789"
    record = logging.LogRecord(
        "recovery.remote", logging.WARNING, __file__, 1,
        "GET %s failed with key %s (metrics %s)",
        ("https://api.example/jobs?api_token=cloud-token-value-456",
         "messora-secret-value-123", "metrics-token-value-789"), None,
    )  # fmt: skip
    RedactSecretsFilter().filter(record)
    try:
        raise RuntimeError("X-API-Key: messora-secret-value-123")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)

    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "recovery.remote"
    assert "[redacted]" in entry["message"]
    assert "messora-secret-value-123" not in line
    assert "cloud-token-value-456" not in line
    assert "metrics-token-value-789" not in line
    assert "\n" not in line


def test_an_event_line_carries_ts_level_process_event_and_ids(settings):
    from recovery.ops import logs

    settings.SALVAGE_METRICS_TOKEN = "metrics-token-value-789"
    record = logging.LogRecord(
        "recovery.states.run", logging.INFO, __file__, 1, "run %s: %s", (7, "accepted"), None
    )
    record.__dict__.update(
        event="run_accepted", run=7, dataset="shop", note="metrics-token-value-789"
    )
    logs.set_process("work")
    try:
        entry = json.loads(JsonFormatter().format(record))
    finally:
        logs.set_process("")
    assert entry["ts"].endswith("Z") and entry["level"] == "INFO"
    assert (entry["process"], entry["event"], entry["run"], entry["dataset"]) == (
        "work",
        "run_accepted",
        7,
        "shop",
    )
    assert entry["message"] == "run 7: accepted"
    assert entry["note"] == "[redacted]"  # every string field is redacted, not only the message


def test_a_line_without_an_event_is_named_after_its_logger():
    entry = json.loads(
        JsonFormatter().format(
            logging.LogRecord("django-q", logging.INFO, __file__, 1, "Processed", None, None)
        )
    )
    assert entry["event"] == "queue" and entry["logger"] == "django-q"


def test_gunicorns_access_lines_become_json_with_their_fields(monkeypatch):
    from recovery.ops.gunicorn_logging import RedactLineFilter, WebJsonFormatter

    monkeypatch.setenv("WEBSCRAPER_WEBHOOK_SECRET", "hook-secret-123456")
    atoms = {"m": "POST", "U": "/hooks/webscraper/hook-secret-123456", "s": "200", "B": 12,
             "D": 2500, "h": "127.0.0.1"}  # fmt: skip
    record = logging.LogRecord(
        "gunicorn.access", logging.INFO, __file__, 1, '%(h)s "%(m)s %(U)s" %(s)s', (atoms,), None
    )
    RedactLineFilter().filter(record)
    line = WebJsonFormatter().format(record)
    entry = json.loads(line)
    assert "hook-secret-123456" not in line
    assert entry["event"] == "http_request" and entry["status"] == 200
    assert entry["path"] == "/hooks/webscraper/[redacted]" and entry["duration_ms"] == 2.5


def test_progress_lines_are_json_when_the_format_is(settings):
    import io

    from recovery.ops.progress import Progress

    settings.SALVAGE_LOG_FORMAT = "json"
    stream = io.StringIO()
    with Progress("export", total=10, unit="rows", stream=stream, tty=True) as progress:
        progress.advance(4)
        progress.log("half way")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["progress_note", "progress"]
    assert (lines[-1]["done"], lines[-1]["total"]) == (4, 10)
