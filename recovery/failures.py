"""Retry by failure class: seed 002's retry table as one mapping, backoff, Retry-After (pure).

The engine never decides per call site what a failure means: `rule_for(error_class)` says what
to do, `backoff()` says how long to wait, `parse_retry_after()` reads a server's own wish.
Nothing here touches the database or the clock except through arguments.
"""

from __future__ import annotations

import enum
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from recovery.keys import valid_artefact_name
from recovery.outcomes import ErrorClass


class Action(enum.StrEnum):
    RETRY = "retry"  # retry_wait with backoff (or Retry-After) inside the budgets
    QUARANTINE = "quarantine"  # a human must change code, config or access first
    GONE = "gone"  # terminal source state (the page no longer exists)
    DEAD = "dead"  # budget exhausted: reproducible dead-letter
    # The previous write may have landed: the next attempt must look the result up by its
    # idempotency key before writing again. For a task this is a retry whose provider sees
    # attempt_count > 1 and looks up first; never a blind repeat.
    LOOKUP_FIRST = "lookup_first"


@dataclass(frozen=True, slots=True)
class Rule:
    action: Action
    # The seed-002 row this class belongs to (documentation, shown in the dashboard and tests).
    seed_row: str
    honours_retry_after: bool = False


ROW_NETWORK = "Connection reset, transient DNS failure or selected timeout"
ROW_5XX = "Transient 500, 502, 503 or 504"
ROW_429 = "429 Too Many Requests"
ROW_ACCESS = "401, persistent 403, login or challenge page"
ROW_GONE = "Confirmed 404, 410 or removed listing"
ROW_PAGE_STATE = "200 OK with a consent page, challenge or wrong template"
ROW_SELECTOR = "Selector, schema or required-field failure"
ROW_UNCERTAIN = "Uncertain destination write"
ROW_BUDGET = "Retry budget exhausted"
# Classes the seed does not name; each needs a change by a human before another try helps.
ROW_LOCAL = "Refused or unusable response (not in the seed table: needs a human)"
# Not fetched at all: the site's robots.txt refuses the URL (fetch.robots). Terminal until a
# human changes the manifest or opts the dataset out with a reason.
ROW_ROBOTS = "Disallowed by the site's robots.txt (not in the seed table: never fetched)"
# A page whose workers keep dying on it (recovery.leases: the crash budget): running it again
# would only kill more workers.
ROW_CRASH_LOOP = "Worker killed on the page every time (not in the seed table: a poison page)"
# The site's robots.txt stayed unreachable (5xx, 429, network) past SALVAGE_ROBOTS_UNREACHABLE_
# LIMIT while its pages waited (fetch.robots, RFC 9309 2.3.1.3): their budget of waiting is spent.
ROW_ROBOTS_UNREACHABLE = (
    "robots.txt unreachable past its bound (not in the seed table: never fetched, RFC 9309)"
)

SEED_ROWS = (
    ROW_NETWORK,
    ROW_5XX,
    ROW_429,
    ROW_ACCESS,
    ROW_GONE,
    ROW_PAGE_STATE,
    ROW_SELECTOR,
    ROW_UNCERTAIN,
    ROW_BUDGET,
)

# THE retry table. Every ErrorClass has exactly one row (tests assert the coverage both ways).
RETRY_TABLE: dict[ErrorClass, Rule] = {
    ErrorClass.NETWORK: Rule(Action.RETRY, ROW_NETWORK),
    ErrorClass.SERVER: Rule(Action.RETRY, ROW_5XX),
    ErrorClass.RATE_LIMITED: Rule(Action.RETRY, ROW_429, honours_retry_after=True),
    ErrorClass.ACCESS: Rule(Action.QUARANTINE, ROW_ACCESS),
    # A 401/403 not yet persistent: retried `refusal_retries` times, `refusal_retry_seconds`
    # apart (the provider's interval, sent as Outcome.retry_after), then the provider reports
    # ACCESS (recovery.providers.direct.auth_verdict). These retries are attempts: max_attempts
    # and max_elapsed_seconds bound them too (spent first, the task is dead, as any retry).
    ErrorClass.AUTH_REFUSED: Rule(Action.RETRY, ROW_ACCESS),
    ErrorClass.LOGIN: Rule(Action.QUARANTINE, ROW_ACCESS),
    ErrorClass.CHALLENGE: Rule(Action.QUARANTINE, ROW_ACCESS),
    ErrorClass.NOT_FOUND: Rule(Action.GONE, ROW_GONE),
    ErrorClass.CONSENT: Rule(Action.QUARANTINE, ROW_PAGE_STATE),
    ErrorClass.WRONG_TEMPLATE: Rule(Action.QUARANTINE, ROW_PAGE_STATE),
    ErrorClass.EMPTY_SHELL: Rule(Action.QUARANTINE, ROW_PAGE_STATE),
    ErrorClass.SELECTOR: Rule(Action.QUARANTINE, ROW_SELECTOR),
    ErrorClass.UNCERTAIN_WRITE: Rule(Action.LOOKUP_FIRST, ROW_UNCERTAIN),
    ErrorClass.BUDGET_EXHAUSTED: Rule(Action.DEAD, ROW_BUDGET),
    ErrorClass.BLOCKED: Rule(Action.QUARANTINE, ROW_LOCAL),
    ErrorClass.TOO_LARGE: Rule(Action.QUARANTINE, ROW_LOCAL),
    ErrorClass.REDIRECTS: Rule(Action.QUARANTINE, ROW_LOCAL),
    ErrorClass.BAD_ENCODING: Rule(Action.QUARANTINE, ROW_LOCAL),
    ErrorClass.CLIENT_ERROR: Rule(Action.QUARANTINE, ROW_LOCAL),
    ErrorClass.INTERNAL: Rule(Action.QUARANTINE, ROW_LOCAL),
    ErrorClass.ROBOTS_DISALLOWED: Rule(Action.QUARANTINE, ROW_ROBOTS),
    ErrorClass.WORKER_CRASH_LOOP: Rule(Action.QUARANTINE, ROW_CRASH_LOOP),
    ErrorClass.SITEMAP_INVALID: Rule(Action.QUARANTINE, ROW_SELECTOR),
    # Only the final verdict: while robots.txt is within its bound the page is deferred
    # (Outcome.deferred), which never reaches this table.
    ErrorClass.ROBOTS_UNREACHABLE: Rule(Action.DEAD, ROW_ROBOTS_UNREACHABLE),
}

# Actions after which the task waits and is claimed again (the budgets apply to these).
RETRYING = frozenset({Action.RETRY, Action.LOOKUP_FIRST})


def rule_for(error_class: ErrorClass | str) -> Rule:
    """The row for a class; an unknown class string is a provider bug: quarantine it."""
    try:
        return RETRY_TABLE[ErrorClass(error_class)]
    except ValueError:
        return RETRY_TABLE[ErrorClass.INTERNAL]


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Full jitter: random(0, min(cap, base * 2**attempt)) seconds (AWS "Exponential Backoff
    And Jitter"): spreads the retries of many tasks that failed together."""
    attempt = max(0, attempt)
    # 2**attempt overflows floats near 1024; past 62 doublings any sane cap is reached anyway.
    ceiling = cap if attempt > 62 else min(cap, base * (2**attempt))
    return (rng or random).uniform(0, max(0.0, ceiling))


# ASCII digits only: RFC 9110 DIGIT is 0-9, and \d would also accept e.g. Arabic-Indic digits.
_DELTA_SECONDS = re.compile(r"[0-9]+")
# RFC 9110 section 5.6.7: IMF-fixdate is preferred; RFC 850 and asctime must be accepted.
_DATE_FORMATS = (
    "%a, %d %b %Y %H:%M:%S GMT",  # Sun, 06 Nov 1994 08:49:37 GMT
    "%A, %d-%b-%y %H:%M:%S GMT",  # Sunday, 06-Nov-94 08:49:37 GMT
    "%a %b %d %H:%M:%S %Y",  # Sun Nov  6 08:49:37 1994
)


def parse_retry_after(value: Any, now: datetime, cap: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value, or None when it is unusable.

    Both RFC 9110 forms: delta-seconds ("120") and an HTTP-date. Garbage, negative or
    fractional numbers give None (the caller falls back to backoff); a date in the past means
    "now" (0); anything above `cap` (SALVAGE_RETRY_AFTER_CAP) is capped, so a hostile or broken
    server cannot park a task for a year.
    """
    if cap is None:
        from django.conf import settings

        cap = float(settings.SALVAGE_RETRY_AFTER_CAP)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1", "replace")
    text = " ".join(str(value).split())  # asctime pads single-digit days with a space
    if not text:
        return None
    if _DELTA_SECONDS.fullmatch(text):
        # Arbitrarily long digit strings are legal; int() is exact, min() caps.
        return float(min(int(text), int(cap)))
    for fmt in _DATE_FORMATS:
        try:
            when = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        return min(max(0.0, (when - now).total_seconds()), float(cap))
    return None


# --- artefacts ---------------------------------------------------------------------------------

# Header names never stored (guarantee 11: secrets never reach the database).
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)
_SECRET_WORDS = ("token", "secret", "password", "session", "auth", "apikey", "api-key", "key")
BODY_EXCERPT_CHARS = 2000


def is_secret_header(name: str) -> bool:
    """A header whose value is a credential or a session (never stored, anywhere)."""
    lowered = name.lower()
    return lowered in _SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def _no_nul(text: str) -> str:
    # PostgreSQL's jsonb refuses \u0000, and the whole commit with it: a binary body (a gzip
    # file, an image served as a page) would otherwise fail its batch's commit every time.
    return text.replace("\x00", "\ufffd")


def sanitise_artefact(
    artefact: dict[str, Any] | None, http_status: int | None = None
) -> dict[str, Any] | None:
    """A diagnostic artefact safe to store: status, headers minus credentials, a bounded body
    excerpt (or a file reference). Providers should already send it clean; this is the last
    line of defence, applied to every artefact the engine writes."""
    if artefact is None:
        return {"status": http_status} if http_status is not None else None
    clean: dict[str, Any] = {}
    status = artefact.get("status", http_status)
    if status is not None:
        clean["status"] = status
    headers = artefact.get("headers")
    if isinstance(headers, dict):
        clean["headers"] = {
            str(k): str(v)[:500] for k, v in headers.items() if not is_secret_header(str(k))
        }
    elif isinstance(headers, list):
        clean["headers"] = {
            str(pair[0]): str(pair[1])[:500]
            for pair in headers
            if isinstance(pair, list | tuple)
            and len(pair) == 2
            and not is_secret_header(str(pair[0]))
        }
    body = artefact.get("body_excerpt")
    if body is not None:
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        clean["body_excerpt"] = _no_nul(str(body)[:BODY_EXCERPT_CHARS])
    for key in ("file", "reason", "content_type", "screenshot_skipped"):
        if key in artefact and artefact[key] is not None:
            clean[key] = _no_nul(str(artefact[key])[:1000])
    # Triage files of the browser provider (recovery.fetch.artefacts): content-hash names only.
    for key, suffix in (("screenshot", "png"), ("rendered_html", "html")):
        if valid_artefact_name(artefact.get(key), suffix):
            clean[key] = artefact[key]
    crashes = artefact.get("worker_crashes")
    if isinstance(crashes, list):
        # A crash loop's evidence (recovery.leases): which workers died holding it, and when.
        clean["worker_crashes"] = [
            {str(k): str(v)[:200] for k, v in item.items()}
            for item in crashes[:50]
            if isinstance(item, dict)
        ]
    # A sitemap file's counts (recovery.fetch.sitemaps): numbers and its kind, nothing else.
    sitemap = artefact.get("sitemap")
    if isinstance(sitemap, dict):
        clean["sitemap"] = {
            str(k)[:40]: v
            for k, v in sitemap.items()
            if (isinstance(v, int) and not isinstance(v, bool))
            or (k == "kind" and v in ("urlset", "sitemapindex"))
        }
    archive = artefact.get("archive")
    if isinstance(archive, dict):
        # The page archive's pointer (recovery.archive): a content-hash name, where the page
        # came from, or why it was not stored.
        kept: dict[str, Any] = {}
        if isinstance(archive.get("sha256"), str) and _SHA256.match(archive["sha256"]):
            kept["sha256"] = archive["sha256"]
        if archive.get("source") in ("fetched", "archive"):
            kept["source"] = archive["source"]
        if archive.get("skipped"):
            kept["skipped"] = _no_nul(str(archive["skipped"])[:300])
        clean["archive"] = kept
    refused = artefact.get("refused")
    if isinstance(refused, list):
        clean["refused"] = [str(item)[:600] for item in refused[:20]]
    return clean
