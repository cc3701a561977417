"""auth_verdict: when a 401/403 stops being retried (pure; the engine side is
tests/db/test_auth_retries.py). The browser provider calls it with the defaults."""

from __future__ import annotations

import pytest

from recovery.outcomes import ErrorClass, Outcome
from recovery.providers.direct import REFUSAL_RETRIES, REFUSAL_RETRY_SECONDS, auth_verdict


def refused() -> Outcome:
    return Outcome(http_status=403, error_class=ErrorClass.AUTH_REFUSED, error_detail="HTTP 403")


@pytest.mark.parametrize("attempt", range(1, REFUSAL_RETRIES + 1))
def test_it_retries_within_the_first_attempts_after_the_interval(attempt):
    outcome = auth_verdict(refused(), attempt)
    assert outcome.error_class is ErrorClass.AUTH_REFUSED
    assert outcome.retry_after == REFUSAL_RETRY_SECONDS


@pytest.mark.parametrize("attempt", [REFUSAL_RETRIES + 1, REFUSAL_RETRIES + 7])
def test_it_makes_a_later_refusal_persistent(attempt):
    outcome = auth_verdict(refused(), attempt)
    assert outcome.error_class is ErrorClass.ACCESS
    assert outcome.retry_after is None
    assert f"still refused on attempt {attempt}" in outcome.error_detail


def test_it_quarantines_the_first_refusal_with_no_retries():
    assert auth_verdict(refused(), 1, retries=0).error_class is ErrorClass.ACCESS


@pytest.mark.parametrize("error_class", [None, ErrorClass.SERVER, ErrorClass.LOGIN])
def test_it_leaves_other_outcomes_alone(error_class):
    outcome = Outcome(http_status=503, error_class=error_class, retry_after=7.0)
    assert auth_verdict(outcome, 9) is outcome
    assert (outcome.error_class, outcome.retry_after) == (error_class, 7.0)
