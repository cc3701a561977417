"""Structured logging that never prints a secret."""

from __future__ import annotations

import json
import logging
import re

from django.conf import settings

# Query parameters and headers that carry credentials in the providers we talk to.
_SECRET_PARAM = re.compile(r"(?i)\b(api_token|api_key|apikey|token|access_token|key)=([^&\s\"']+)")
# The webhook's secret is a path segment (/hooks/webscraper/<secret>); any segment there is
# hidden, right or wrong, since a mistyped secret is a character away from the real one.
_HOOK_PATH = re.compile(r"(/hooks/[A-Za-z0-9_-]+/)[^/?#\s\"']+")
_SECRET_HEADER = re.compile(r"(?i)\b(x-api-key|authorization)(\"?\s*[:=]\s*\"?)([^\s\"',}]+)")


def configured_secrets() -> list[str]:
    names = (
        "MESSORA_API_KEY",
        "TORNADO_API_KEY",
        "WEBSCRAPER_API_TOKEN",
        "WEBSCRAPER_WEBHOOK_SECRET",
        "SALVAGE_METRICS_TOKEN",
        "SECRET_KEY",
    )
    return [value for name in names if len(value := getattr(settings, name, "") or "") >= 6]


def redact_credentials(text: str) -> str:
    """Credential-carrying query parameters, headers and webhook paths replaced; reads no
    settings (gunicorn's master process uses it before Django is configured)."""
    if not text:
        return text
    text = _HOOK_PATH.sub(r"\1[redacted]", text)
    text = _SECRET_PARAM.sub(lambda m: f"{m.group(1)}=[redacted]", text)
    return _SECRET_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}[redacted]", text)


def redact(text: str) -> str:
    """Remove credentials from free text (URLs, header dumps, error messages)."""
    if not text:
        return text
    text = redact_credentials(text)
    for secret in configured_secrets():
        text = text.replace(secret, "[redacted]")
    return text


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry)
