"""What a provider said, made safe to store: the one sanitiser of responses.

Free text goes through `logs.redact` (credential query parameters, headers, webhook paths and
the configured secrets); structures lose every credential-named field (`sanitise` also cuts
long strings and lists for the small summaries a job keeps, `clean_payload` keeps result data
whole); headers lose credentials, cookies and sessions (`recovery.failures.is_secret_header`,
the rule the page artefacts use). `remote_base` (the providers' side), the remote-job
lifecycle and the incident records (`recovery.ops.incidents`) all call these, so a response
is cleaned one way wherever it is kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from recovery.failures import is_secret_header
from recovery.ops import logs

# Field names that carry credentials (api_key, x-api-key, access_token, client_secret, ...);
# "object_key" or "sku" are data and stay.
SECRET_FIELD = re.compile(
    r"(?i)^(x-)?(api[-_]?key|api[-_]?token|access[-_]?token|token|secret|password|"
    r"authorization|signature|sig|cookie|set-cookie)$|[-_](token|secret|password|api[-_]?key)$"
)

# An incident keeps the response body whole up to this many characters (seed 001: "the
# complete sanitised response"), then says it was cut.
BODY_CAP = 64 * 1024
HEADER_VALUE_CAP = 1000


def sanitise(value: Any, depth: int = 0) -> Any:
    """A provider response safe to store: credentials redacted, long strings and lists cut."""
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            str(k)[:100]: sanitise(v, depth + 1)
            for k, v in list(value.items())[:50]
            if not SECRET_FIELD.search(str(k))
        }
    if isinstance(value, list):
        return [sanitise(v, depth + 1) for v in value[:20]]
    if isinstance(value, str):
        return logs.redact(value[:1000])
    return value


def clean_payload(value: Any) -> Any:
    """A result item as data: complete (no cutting), minus credential fields and values."""
    if isinstance(value, dict):
        return {
            str(k): clean_payload(v) for k, v in value.items() if not SECRET_FIELD.search(str(k))
        }
    if isinstance(value, list):
        return [clean_payload(v) for v in value]
    if isinstance(value, str):
        return logs.redact(value)
    return value


def _no_nul(text: str) -> str:
    # PostgreSQL refuses \u0000 in text and jsonb (and the whole transaction with it).
    return text.replace("\x00", "\ufffd")


def headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Response headers without credentials, cookies or sessions; values redacted and capped.
    A repeated header keeps its values joined by ", " (as HTTP allows for most)."""
    out: dict[str, str] = {}
    for name, value in pairs:
        name = str(name)
        if is_secret_header(name) or SECRET_FIELD.search(name):
            continue
        key = name.lower()[:100]
        text = _no_nul(logs.redact(str(value)[:HEADER_VALUE_CAP]))
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def body(text: str, cap: int = BODY_CAP) -> tuple[str, bool]:
    """A response body safe to store, and whether it was cut at `cap` characters.

    A JSON body loses its credential-named fields (then is written back compactly); any body
    has its credential-looking values redacted. A body far over the cap is read as text (a
    JSON document cut in the middle would not parse anyway)."""
    if len(text) > 2 * cap:
        return _no_nul(logs.redact(text[: 2 * cap]))[:cap], True
    try:
        parsed = json.loads(text)
    except ValueError:
        cleaned = logs.redact(text)
    else:
        cleaned = json.dumps(clean_payload(parsed), ensure_ascii=False, sort_keys=True)
    cleaned = _no_nul(cleaned)
    return cleaned[:cap], len(cleaned) > cap
