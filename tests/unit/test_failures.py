"""The retry table, full-jitter backoff and Retry-After parsing (pure, no database)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from recovery import failures
from recovery.failures import Action
from recovery.outcomes import ErrorClass

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)

# Seed 002's "Retry by failure class" table, row by row, with the classes that report it.
SEED_TABLE = [
    (failures.ROW_NETWORK, [ErrorClass.NETWORK], Action.RETRY),
    (failures.ROW_5XX, [ErrorClass.SERVER], Action.RETRY),
    (failures.ROW_429, [ErrorClass.RATE_LIMITED], Action.RETRY),
    (
        failures.ROW_ACCESS,
        [ErrorClass.ACCESS, ErrorClass.LOGIN, ErrorClass.CHALLENGE],
        Action.QUARANTINE,
    ),
    # "persistent": a first 401/403 is retried a bounded number of times (issue 31).
    (failures.ROW_ACCESS, [ErrorClass.AUTH_REFUSED], Action.RETRY),
    (failures.ROW_GONE, [ErrorClass.NOT_FOUND], Action.GONE),
    (
        failures.ROW_PAGE_STATE,
        [ErrorClass.CONSENT, ErrorClass.WRONG_TEMPLATE, ErrorClass.EMPTY_SHELL],
        Action.QUARANTINE,
    ),
    (failures.ROW_SELECTOR, [ErrorClass.SELECTOR, ErrorClass.SITEMAP_INVALID], Action.QUARANTINE),
    (failures.ROW_UNCERTAIN, [ErrorClass.UNCERTAIN_WRITE], Action.LOOKUP_FIRST),
    (failures.ROW_BUDGET, [ErrorClass.BUDGET_EXHAUSTED], Action.DEAD),
]
# Dead, though the seed does not name it: robots.txt unreachable past its bound (RFC 9309).
DEAD_CLASSES = [ErrorClass.ROBOTS_UNREACHABLE]
LOCAL_CLASSES = [
    ErrorClass.BLOCKED,
    ErrorClass.TOO_LARGE,
    ErrorClass.REDIRECTS,
    ErrorClass.BAD_ENCODING,
    ErrorClass.CLIENT_ERROR,
    ErrorClass.INTERNAL,
    ErrorClass.ROBOTS_DISALLOWED,
    ErrorClass.WORKER_CRASH_LOOP,
]


@pytest.mark.parametrize(("row", "classes", "action"), SEED_TABLE, ids=[r[0] for r in SEED_TABLE])
def test_it_maps_each_seed_row_to_its_action(row, classes, action):
    for error_class in classes:
        rule = failures.rule_for(error_class)
        assert rule.action == action
        assert rule.seed_row == row


@pytest.mark.parametrize("error_class", LOCAL_CLASSES)
def test_it_quarantines_classes_the_seed_does_not_name(error_class):
    assert failures.rule_for(error_class).action == Action.QUARANTINE


def test_the_table_covers_every_class_and_every_seed_row_exactly():
    assert set(failures.RETRY_TABLE) == set(ErrorClass)
    named = {c for _row, classes, _a in SEED_TABLE for c in classes} | set(LOCAL_CLASSES)
    assert named | set(DEAD_CLASSES) == set(ErrorClass)
    assert {rule.seed_row for rule in failures.RETRY_TABLE.values()} == set(failures.SEED_ROWS) | {
        failures.ROW_LOCAL,
        failures.ROW_ROBOTS,
        failures.ROW_CRASH_LOOP,
        failures.ROW_ROBOTS_UNREACHABLE,
    }


@pytest.mark.parametrize("error_class", DEAD_CLASSES)
def test_a_robots_txt_unreachable_past_its_bound_is_dead(error_class):
    assert failures.rule_for(error_class).action == Action.DEAD


def test_only_429_is_marked_as_honouring_retry_after():
    honouring = {c for c, r in failures.RETRY_TABLE.items() if r.honours_retry_after}
    assert honouring == {ErrorClass.RATE_LIMITED}


def test_an_unknown_class_string_is_treated_as_a_provider_bug():
    assert failures.rule_for("no_such_class").action == Action.QUARANTINE


@pytest.mark.parametrize("attempt", [0, 1, 2, 5, 10])
def test_backoff_stays_within_full_jitter_bounds(attempt):
    rng = random.Random(attempt)
    ceiling = min(60.0, 0.5 * 2**attempt)
    samples = [failures.backoff(attempt, 0.5, 60.0, rng) for _ in range(2000)]
    assert all(0 <= s <= ceiling for s in samples)
    # Full jitter spreads over the whole range, not just near the ceiling.
    assert min(samples) < ceiling * 0.05
    assert max(samples) > ceiling * 0.95


def test_backoff_is_capped_for_huge_attempt_numbers():
    rng = random.Random(7)
    assert all(0 <= failures.backoff(10_000, 1.0, 30.0, rng) <= 30.0 for _ in range(100))
    assert failures.backoff(3, 0.0, 30.0, rng) == 0.0
    assert 0 <= failures.backoff(-4, 1.0, 30.0, rng) <= 1.0


def imf(dt: datetime) -> str:
    return dt.strftime("%a, %d %b %Y %H:%M:%S GMT")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("0", 0.0),
        ("  7 ", 7.0),
        (b"30", 30.0),
        ("99999999999999999999999", 3600.0),  # capped
        ("86400", 3600.0),
        (imf(NOW + timedelta(seconds=90)), 90.0),
        ((NOW + timedelta(minutes=2)).strftime("%A, %d-%b-%y %H:%M:%S GMT"), 120.0),  # RFC 850
        ("Sun Nov 29 12:00:45 2026", 45.0),  # asctime
        ("Sun Nov  1 12:00:45 2026", 0.0),  # asctime, padded day, in the past
        (imf(NOW - timedelta(hours=1)), 0.0),  # a past date means "now"
        (imf(NOW + timedelta(days=30)), 3600.0),  # capped
    ],
)
def test_it_parses_both_retry_after_forms(value, expected):
    assert failures.parse_retry_after(value, NOW, cap=3600) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "-5",
        "1.5",
        "+30",
        "soon",
        "120 seconds",
        "0x10",
        "Sun, 32 Nov 2026 12:00:00 GMT",
        "Sun, 29 Nov 2026 12:00:00 PST",
        "2026-11-29T12:00:00Z",
        "١٢",  # non-ASCII digits are not delta-seconds
    ],
)
def test_it_refuses_malformed_retry_after(value):
    assert failures.parse_retry_after(value, NOW, cap=3600) is None


def test_retry_after_cap_defaults_to_the_setting(settings):
    settings.SALVAGE_RETRY_AFTER_CAP = 50
    assert failures.parse_retry_after("600", NOW) == 50.0


def test_artefacts_lose_secrets_and_long_bodies():
    clean = failures.sanitise_artefact(
        {
            "status": 401,
            "headers": {
                "Content-Type": "text/html",
                "Set-Cookie": "sid=1",
                "Authorization": "Bearer x",
                "X-Auth-Token": "t",
                "X-Request-Id": "abc",
            },
            "body_excerpt": b"<html>" + b"a" * 5000,
            "url": "https://api.example/?api_key=secret",
        }
    )
    assert clean["status"] == 401
    assert clean["headers"] == {"Content-Type": "text/html", "X-Request-Id": "abc"}
    assert len(clean["body_excerpt"]) == failures.BODY_EXCERPT_CHARS
    assert "url" not in clean
    assert failures.sanitise_artefact(None, 403) == {"status": 403}
    assert failures.sanitise_artefact(None) is None


def test_a_binary_body_excerpt_keeps_no_nul_character():
    # PostgreSQL's jsonb refuses \u0000: a gzip body's excerpt once failed its batch's commit.
    clean = failures.sanitise_artefact({"body_excerpt": "\x1f\x8b\x08\x00abc", "reason": "a\x00b"})
    assert "\x00" not in clean["body_excerpt"] and "\x00" not in clean["reason"]
    assert clean["body_excerpt"].endswith("abc")
