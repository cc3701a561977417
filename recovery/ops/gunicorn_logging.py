"""gunicorn's logger class for Salvage: access and error lines never carry a secret.

gunicorn writes its own access and error logs outside Django's logging, so Django's redaction
filter never sees them. The webhook's secret travels in the request path
(`/hooks/webscraper/<secret>`, Web Scraper Cloud cannot sign or set headers) and provider
URLs carry `api_token=` query parameters, so a plain `--access-logfile` would write both in
clear. Use it with `--logger-class recovery.ops.gunicorn_logging.RedactingLogger` (the demo and the
documented production command do).

This runs in gunicorn's master process before Django is configured, so it reads the secrets'
literal values from the environment (the same variables recovery.settings reads).

With SALVAGE_LOG_FORMAT=json every access and error line is one JSON object like the rest of
Salvage's (recovery.ops.logs): `process` "web", `event` "http_request" for an access line (with
`method`, `path`, `status`, `bytes`, `duration_ms`) and "web_server" for an error-log line.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from gunicorn.glogging import Logger

from recovery.ops.logs import JsonFormatter, json_format, redact_credentials

_SECRET_VARIABLES = (
    "WEBSCRAPER_WEBHOOK_SECRET",
    "WEBSCRAPER_API_TOKEN",
    "MESSORA_API_KEY",
    "TORNADO_API_KEY",
    "SALVAGE_METRICS_TOKEN",
    "SECRET_KEY",
)


def redact_line(text: str) -> str:
    text = redact_credentials(text)
    for name, value in os.environ.items():
        if (name in _SECRET_VARIABLES or name.startswith("SALVAGE_MANIFEST_")) and len(value) >= 6:
            text = text.replace(value, "[redacted]")
    return text


class RedactLineFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_line(message)
        if cleaned != message:
            if isinstance(record.args, dict):
                record._access_atoms = record.args  # for the JSON fields, redacted there
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            # A traceback can quote the request line; format it now, redacted.
            record.exc_text = redact_line(logging.Formatter().formatException(record.exc_info))
        return True


class WebJsonFormatter(JsonFormatter):
    """Salvage's JSON lines for gunicorn's records, redacted from the environment's secrets."""

    def __init__(self) -> None:
        super().__init__(redactor=redact_line)

    def add_record_fields(self, log_data: dict[str, Any], record: logging.LogRecord) -> None:
        if record.name != "gunicorn.access":
            return
        atoms = getattr(record, "_access_atoms", None) or record.args
        if not isinstance(atoms, dict):
            return
        # gunicorn's access atoms (its SafeAtoms): m method, U path, s status, B bytes, D us.
        for field, atom in (("method", "m"), ("path", "U"), ("status", "s"), ("bytes", "B")):
            value = atoms.get(atom)
            if value not in (None, "-"):
                log_data[field] = int(value) if field in ("status", "bytes") else value
        micros = atoms.get("D")
        if micros not in (None, "-"):
            log_data["duration_ms"] = round(int(micros) / 1000, 1)


class RedactingLogger(Logger):
    """gunicorn's Logger with every access and error line redacted (and JSON when asked)."""

    def setup(self, cfg) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            if not any(isinstance(f, RedactLineFilter) for f in log.filters):
                log.addFilter(RedactLineFilter())
            if json_format():
                for handler in log.handlers:
                    handler.setFormatter(WebJsonFormatter())
