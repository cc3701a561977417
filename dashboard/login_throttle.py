"""Log-in throttling per (username, client address), kept in the shared database cache.

After MAX_FAILURES failed attempts within WINDOW seconds that pair is refused, even with the
right password, until the window passes. The address is REMOTE_ADDR only: X-Forwarded-For is
never trusted here, so a forged header cannot reset the count (behind a proxy, the proxy must
set REMOTE_ADDR, e.g. gunicorn's --forwarded-allow-ips with a trusted proxy).
"""

from __future__ import annotations

import hashlib
import time

from django.core.cache import cache
from django.http import HttpRequest

MAX_FAILURES = 5
WINDOW = 15 * 60
MESSAGE = (
    "Too many failed log-in attempts for this account from your address. Try again in 15 minutes."
)


def _key(request: HttpRequest, username: str) -> str:
    raw = f"{username.strip().lower()}|{request.META.get('REMOTE_ADDR', '')}"
    return "login-failures:" + hashlib.sha256(raw.encode()).hexdigest()


def failures(request: HttpRequest, username: str) -> int:
    value = cache.get(_key(request, username))
    return value[0] if value else 0


def is_locked(request: HttpRequest, username: str) -> bool:
    return failures(request, username) >= MAX_FAILURES


def record_failure(request: HttpRequest, username: str) -> None:
    # (count, first failure time): the expiry is set from the first failure so later failures
    # never extend the window (cache.incr would reset it to the default timeout).
    key = _key(request, username)
    now = time.time()
    count, first = cache.get(key) or (0, now)
    remaining = max(1, int(WINDOW - (now - first)))
    cache.set(key, (count + 1, first), remaining)


def clear(request: HttpRequest, username: str) -> None:
    cache.delete(_key(request, username))
