"""gunicorn's logger class for Salvage: access and error lines never carry a secret.

gunicorn writes its own access and error logs outside Django's logging, so Django's redaction
filter never sees them. The webhook's secret travels in the request path
(`/hooks/webscraper/<secret>`, Web Scraper Cloud cannot sign or set headers) and provider
URLs carry `api_token=` query parameters, so a plain `--access-logfile` would write both in
clear. Use it with `--logger-class recovery.gunicorn_logging.RedactingLogger` (the demo and the
documented production command do).

This runs in gunicorn's master process before Django is configured, so it reads the secrets'
literal values from the environment (the same variables recovery.settings reads).
"""

from __future__ import annotations

import logging
import os

from gunicorn.glogging import Logger

from recovery.logs import redact_credentials

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
    for name in _SECRET_VARIABLES:
        value = os.environ.get(name, "")
        if len(value) >= 6:
            text = text.replace(value, "[redacted]")
    return text


class RedactLineFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_line(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            # A traceback can quote the request line; format it now, redacted.
            record.exc_text = redact_line(logging.Formatter().formatException(record.exc_info))
        return True


class RedactingLogger(Logger):
    """gunicorn's Logger with every access and error line redacted."""

    def setup(self, cfg) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            if not any(isinstance(f, RedactLineFilter) for f in log.filters):
                log.addFilter(RedactLineFilter())
