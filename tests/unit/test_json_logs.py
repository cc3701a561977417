"""SALVAGE_LOG_FORMAT=json: one JSON object per line, never a configured secret."""

from __future__ import annotations

import json
import logging

from recovery.logs import JsonFormatter, RedactSecretsFilter


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
