"""The words every layer shares about one task's execution: its input, what it observed and
discovered, how it ended, and the failure classes of seed 002's retry table.

Pure data, no Django: the fetch wing produces these, the providers return them, `failures` maps
an `ErrorClass` to an action and `leases` commits an `Outcome` under the task's lease.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ErrorClass(enum.StrEnum):
    """Failure classes of seed 002's retry table (recovery.failures maps each to an action)."""

    NETWORK = "network"  # connection reset, DNS failure, selected timeouts
    SERVER = "server_error"  # 500/502/503/504
    RATE_LIMITED = "rate_limited"  # 429
    ACCESS = "access_denied"  # a persistent 401/403: quarantined, a person must act
    # A 401/403 not yet persistent: retried a bounded number of times (providers.direct:
    # refusal_retries, refusal_retry_seconds), then it becomes ACCESS.
    AUTH_REFUSED = "auth_refused"
    LOGIN = "login_page"
    CHALLENGE = "challenge_page"
    CONSENT = "consent_page"
    WRONG_TEMPLATE = "wrong_template"
    EMPTY_SHELL = "empty_shell"
    NOT_FOUND = "not_found"  # 404/410, removed listing: terminal source state
    SELECTOR = "selector_failure"  # selector/schema/required-field failure
    UNCERTAIN_WRITE = "uncertain_write"  # destination write with unknown outcome
    BUDGET_EXHAUSTED = "budget_exhausted"
    BLOCKED = "blocked_url"  # refused by outbound safety (private address, bad scheme)
    TOO_LARGE = "too_large"  # response over the size cap
    REDIRECTS = "redirect_loop"  # too many redirects
    BAD_ENCODING = "bad_encoding"
    CLIENT_ERROR = "client_error"  # other 4xx
    INTERNAL = "internal_error"  # a bug in a provider: quarantined for a human
    ROBOTS_DISALLOWED = "robots_disallowed"  # the site's robots.txt refuses it: never fetched
    # The page's workers died on it SALVAGE_CRASH_BUDGET times (a poison page): not run again.
    WORKER_CRASH_LOOP = "worker_crash_loop"
    SITEMAP_INVALID = "sitemap_invalid"  # malformed XML, a DOCTYPE, not a sitemap (sitemaps.py)
    # The origin's robots.txt could not be read (5xx, 429, network): its pages wait, deferred,
    # and end with this class once it stayed unreachable past its bound (fetch.robots).
    ROBOTS_UNREACHABLE = "robots_unreachable"


@dataclass(slots=True)
class TaskInput:
    """What a provider needs to run one task (copied from the claimed row)."""

    task_id: int
    task_key: str
    run_id: int
    url: str
    page_type: str
    partition: str
    window: str
    dataset: str
    attempt_count: int
    lease_token: int
    depth: int = 0
    navigation: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    # The page archive's blob to re-extract instead of fetching (a "from the archive" recovery
    # batch: recovery.archive); "" fetches the page.
    archived: str = ""


@dataclass(slots=True)
class Observed:
    """One entity extracted from a page; the engine derives the observation key."""

    entity_key: str
    payload: dict[str, Any]


@dataclass(slots=True)
class Discovered:
    """A child URL found on a page; becomes a task in the parent's commit transaction."""

    url: str
    page_type: str
    partition: str = ""
    priority: int = 0
    navigation: dict[str, Any] = field(default_factory=dict)
    discovery: str = "link"


@dataclass(slots=True)
class Outcome:
    """The result of one execution. `error_class` None means success."""

    http_status: int | None = None
    observations: list[Observed] = field(default_factory=list)
    discovered: list[Discovered] = field(default_factory=list)
    error_class: ErrorClass | None = None
    error_detail: str = ""
    retry_after: float | None = None  # seconds, already parsed and capped
    artefact: dict[str, Any] | None = None  # status, headers without secrets, body excerpt
    elapsed_s: float = 0.0
    # Not an attempt at the page: the host asked us to wait (its robots.txt is unreachable,
    # its shared politeness slot is far). The task waits `retry_after` seconds in retry_wait
    # and the wait spends none of its retry budgets (recovery.leases.plan.plan_outcome).
    deferred: bool = False

    @property
    def ok(self) -> bool:
        return self.error_class is None
