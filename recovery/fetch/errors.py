"""A fetch's two failures and its one postponement, shared by every module of the fetch path.

In: the retry-table row (`ErrorClass`) and a detail for the operator. Out: `FetchError`, which
the providers turn into a failed `Outcome`; `BlockedURL` is outbound safety's refusal (a bad
scheme, an unusable URL, a forbidden address), always `ErrorClass.BLOCKED`. `TurnDeferred` is
no failure: the host's shared turn (recovery.fetch.hostslots) is too far away to wait for, and
the providers turn it into a deferred `Outcome` (not an attempt); `SeatDeferred` is the same
postponement when every one of the host's shared seats (recovery.fetch.hostseats) stays taken.
"""

from __future__ import annotations

from typing import Any

from recovery.outcomes import ErrorClass


class FetchError(Exception):
    """A fetch that produced no usable response; `error_class` says which retry-table row."""

    error_class: ErrorClass = ErrorClass.NETWORK

    def __init__(self, error_class: ErrorClass, detail: str, **context: Any) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
        self.context = context  # e.g. status, headers, hops: for the artefact


class BlockedURL(FetchError):
    """Refused by outbound safety: bad scheme, unusable URL, or a forbidden address."""

    def __init__(self, detail: str, **context: Any) -> None:
        super().__init__(ErrorClass.BLOCKED, detail, **context)


class TurnDeferred(Exception):
    """The host's next turn is `wait` seconds away: defer the page, nothing was sent."""

    def __init__(self, host: str, wait: float, spacing: float) -> None:
        self.host, self.wait, self.spacing = host, wait, spacing
        self.detail = (
            f"deferred: {host}'s next turn is in {wait:.1f}s "
            f"(one request every {spacing:g}s, shared by every worker)"
        )
        super().__init__(self.detail)


class SeatDeferred(TurnDeferred):
    """Every seat of the host (its `per_host`, shared by every worker) stayed taken: defer
    the page for `wait` seconds, nothing was sent. A TurnDeferred, so every provider that
    defers a far turn defers this too."""

    def __init__(self, host: str, wait: float, seats: int) -> None:
        super().__init__(host, wait, 0.0)
        self.detail = (
            f"deferred: {host}'s {seats} concurrent request{'s' if seats != 1 else ''} "
            "(per_host, shared by every worker) are all in flight"
        )
        self.args = (self.detail,)
