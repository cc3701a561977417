"""On PostgreSQL the claim and the commit run as server-side prepared statements (parsed and
planned once per connection); SALVAGE_PG_PREPARE=0 turns that off for a pooler that cannot
carry them across transactions."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from recovery import leases
from recovery.outcomes import Observed, Outcome
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _claim_and_commit() -> None:
    run = make_run()
    make_tasks(run, 3)
    connection.close()  # a fresh connection: nothing prepared on it yet
    claimed = leases.claim("w-prepared", 3)
    outcomes = [Outcome(http_status=200, observations=[Observed(c.url, {"v": 1})]) for c in claimed]
    summary = leases.commit_outcomes("w-prepared", claimed, outcomes)
    assert summary.committed == 3


def test_the_claim_and_the_commit_are_prepared(postgres_only):
    _claim_and_commit()
    prepared = _prepared()
    assert len(prepared) == 2, prepared
    assert any("FOR UPDATE SKIP LOCKED" in text for text in prepared)  # the claim
    assert any("unnest(" in text for text in prepared)  # the commit


@override_settings(SALVAGE_PG_PREPARE=False)
def test_nothing_is_prepared_when_turned_off(postgres_only):
    _claim_and_commit()
    assert _prepared() == []


def test_the_hot_statements_are_parsed_once_per_process():
    # recovery.leases.postgres keeps the claim's and the commit's placeholder parse through
    # psycopg's private query class (pinned version). If an upgrade moves it, the fallback is
    # the plain cursor, which re-parses the 6 KB commit text every batch: fail here instead.
    import psycopg

    from recovery.leases import postgres

    assert postgres._Cursor is not psycopg.Cursor, "psycopg._queries moved: see _cursor_class"
    assert issubclass(postgres._Cursor, psycopg.Cursor)
    assert postgres._Cursor._query_cls.__name__ == "ParsedOnce"
