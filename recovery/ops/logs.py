"""Structured logging that never prints a secret.

With SALVAGE_LOG_FORMAT=json every line a process writes is one JSON object (python-json-logger
formats it): `ts` (UTC, ISO 8601), `level`, `process` (work, qcluster, dispatch, deliver, web,
or the command's name), `event` (a short machine name: `run_accepted`, `worker_started`, ...;
a line logged without one is named after its logger), `logger`, `message`, the ids a line is
about (`run`, `task`, `dataset`, `worker`, `batch`, `partition`) and `exc` for a traceback.
Every string in it, message and traceback included, passes `redact`.

`event(logger, name, message, ...)` logs a named event with its ids; the lifecycle events
(a run's moves, a partition quarantined or flagged, a recovery batch completed, a loop
started or stopped) are logged once each, where the move happens, after its transaction
commits (a move rolled back logs nothing).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from django.conf import settings
from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

# Query parameters and headers that carry credentials in the providers we talk to.
_SECRET_PARAM = re.compile(r"(?i)\b(api_token|api_key|apikey|token|access_token|key)=([^&\s\"']+)")
# The webhook's secret is a path segment (/hooks/webscraper/<secret>); any segment there is
# hidden, right or wrong, since a mistyped secret is a character away from the real one.
_HOOK_PATH = re.compile(r"(/hooks/[A-Za-z0-9_-]+/)[^/?#\s\"']+")
_SECRET_HEADER = re.compile(r"(?i)\b(x-api-key|authorization)(\"?\s*[:=]\s*\"?)([^\s\"',}]+)")


MANIFEST_PREFIX = "SALVAGE_MANIFEST_"


def configured_secrets() -> list[str]:
    names = (
        "MESSORA_API_KEY",
        "TORNADO_API_KEY",
        "WEBSCRAPER_API_TOKEN",
        "WEBSCRAPER_WEBHOOK_SECRET",
        "SALVAGE_METRICS_TOKEN",
        "SECRET_KEY",
    )
    found = [value for name in names if len(value := getattr(settings, name, "") or "") >= 6]
    # A schedule's manifest credentials (recovery.intake.manifest_credentials) live here only.
    found += [v for k, v in os.environ.items() if k.startswith(MANIFEST_PREFIX) and len(v) >= 6]
    return found


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


# --- the process and its events ----------------------------------------------------------

_process: str | None = None


def set_process(name: str) -> None:
    """Name this process in every line (`work`, `qcluster`, ...); forked children keep it."""
    global _process
    _process = name


def process_name() -> str:
    """The name set by the command, else one read from the command line: gunicorn (its
    master and workers, before and after Django is set up) is `web`, `manage.py X` is `X`."""
    if _process:
        return _process
    argv = sys.argv or [""]
    program = argv[0].replace("\\", "/")
    if program.endswith("gunicorn") or "/gunicorn/" in program:
        return "web"
    if program.endswith("manage.py") and len(argv) > 1:
        return argv[1]
    return os.path.basename(program).removesuffix(".py") or "python"


def json_format() -> bool:
    """True when SALVAGE_LOG_FORMAT=json (read from the settings once Django is set up, else
    from the environment: gunicorn's master reads it before Django exists)."""
    if settings.configured:
        return getattr(settings, "SALVAGE_LOG_FORMAT", "plain") == "json"
    return os.environ.get("SALVAGE_LOG_FORMAT", "plain").strip().lower() == "json"


def event(
    logger: logging.Logger,
    name: str,
    message: str,
    *args: object,
    level: int = logging.INFO,
    **ids: Any,
) -> None:
    """Log `message % args` as the event `name`, with the ids it is about as fields."""
    logger.log(level, message, *args, extra={"event": name, **ids})


def stopped(stdout: IO[str] | Any, line: str, logger: logging.Logger, **ids: Any) -> None:
    """A loop's last word: the `worker_stopped` event, whose message is the summary `line`.
    In plain format the line is also printed on stdout as before (scripts read it); in JSON
    format stdout stays silent, so that every line the process writes is JSON."""
    event(logger, "worker_stopped", "%s", line, **ids)
    if not json_format():
        stdout.write(line)


def gave_up(message: str, logger: logging.Logger, **ids: Any) -> BaseException:
    """What a loop raises when it gives up (a database outage past its limit): exit status 1
    with `message` as its one line. Plain format: a CommandError, which Django prints as
    "CommandError: ..."; JSON format: the `worker_exited` event, then SystemExit(1), so the
    last line is JSON too."""
    from django.core.management.base import CommandError

    if not json_format():
        return CommandError(message, returncode=1)
    event(logger, "worker_exited", "%s", message, level=logging.ERROR, **ids)
    return SystemExit(1)


# --- JSON lines -----------------------------------------------------------------------------


def json_line(logger_name: str, name: str, message: str, **fields: Any) -> str:
    """One JSON line for a writer that prints itself rather than through logging (the
    progress display writes to its own stream)."""
    record = logging.LogRecord(logger_name, logging.INFO, "", 0, message, None, None)
    record.__dict__.update(fields, event=name)
    return _line_formatter().format(record)


_formatter: list[JsonFormatter] = []


def _line_formatter() -> JsonFormatter:
    if not _formatter:
        _formatter.append(JsonFormatter())
    return _formatter[0]


# Lines logged without an event of their own: named after their logger, these more plainly.
DEFAULT_EVENTS = {
    "gunicorn.access": "http_request",
    "gunicorn.error": "web_server",
    "django.request": "request_error",
    "django.server": "http_request",
    "django-q": "queue",
    "py.warnings": "warning",
}


def default_event(logger_name: str) -> str:
    return DEFAULT_EVENTS.get(logger_name) or logger_name.rsplit(".", 1)[-1] or "log"


def _timestamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class JsonFormatter(_LibraryJsonFormatter):
    """One JSON object per record (see the module docstring); `redactor` cleans every string
    (gunicorn's master passes one that reads the secrets from the environment)."""

    def __init__(self, *args: Any, redactor: Callable[[str], str] | None = None, **kwargs: Any):
        kwargs.setdefault("rename_fields", {"exc_info": "exc", "stack_info": "stack"})
        kwargs.setdefault("json_ensure_ascii", False)
        super().__init__(*args, **kwargs)
        self.redactor = redactor or redact

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["ts"] = _timestamp(record.created)
        log_data["level"] = record.levelname
        log_data["process"] = process_name()
        log_data["event"] = getattr(record, "event", None) or default_event(record.name)
        log_data["logger"] = record.name
        log_data["message"] = record.message
        super().add_fields(log_data, record, message_dict)
        self.add_record_fields(log_data, record)

    def add_record_fields(self, log_data: dict[str, Any], record: logging.LogRecord) -> None:
        """More fields from a record of a known kind (gunicorn's access lines)."""

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {key: self._clean(value) for key, value in log_data.items()}

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redactor(value)
        if isinstance(value, dict):
            return {k: self._clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._clean(v) for v in value]
        return value
