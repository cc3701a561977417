"""The claim query reads task_claim_idx and never scans the task table (PostgreSQL plan)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from recovery.leases import postgres as leases_postgres
from recovery.models import Task
from recovery.states.choices import TaskState
from tests.support.factories import make_run, make_tasks

pytestmark = pytest.mark.django_db

# Seed 002's claim, as the brief of issue 2 words it.
SEED_CLAIM = """
UPDATE recovery_task SET state = 'leased', lease_owner = 'w1',
    lease_until = now() + interval '5 minutes', lease_token = recovery_task.lease_token + 1,
    attempt_count = recovery_task.attempt_count + 1
FROM (
    SELECT id FROM recovery_task
    WHERE state IN ('pending', 'retry_wait', 'leased') AND next_attempt_at <= now()
    ORDER BY priority DESC, next_attempt_at
    LIMIT 50
    FOR UPDATE SKIP LOCKED
) AS claim
WHERE recovery_task.id = claim.id
"""


@pytest.fixture
def twenty_thousand_tasks(postgres_only):
    """A realistic mix: most tasks finished, some due, some waiting for a retry."""
    run = make_run()
    make_tasks(run, 14_000, partition="done", state=TaskState.COMMITTED)
    make_tasks(run, 500, partition="bad", state=TaskState.QUARANTINED)
    make_tasks(run, 4_000, partition="due", state=TaskState.PENDING)
    make_tasks(run, 1_000, partition="wait", state=TaskState.RETRY_WAIT)
    make_tasks(run, 500, partition="busy", state=TaskState.LEASED)
    later = timezone.now() + timedelta(hours=1)
    Task.objects.filter(partition__in=["wait", "busy"]).update(next_attempt_at=later)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE recovery_task")
    assert Task.objects.count() == 20_000


def plan_nodes(sql: str, params=()) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        raw = cursor.fetchone()[0]
    plan = raw if isinstance(raw, list) else json.loads(raw)
    nodes, stack = [], [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.get("Plans", []))
    return nodes


def assert_index_claim(nodes: list[dict]) -> None:
    scans = [
        (n["Node Type"], n.get("Relation Name"), n.get("Index Name"))
        for n in nodes
        if "Scan" in n["Node Type"]
    ]
    assert not [s for s in scans if s[0] == "Seq Scan" and s[1] == "recovery_task"], scans
    assert any(s[2] == "task_claim_idx" for s in scans), scans


# One test, so the 20,000 rows are written once (the three checks share the fixture).
def test_the_claim_queries_use_task_claim_idx_and_never_scan_the_table(twenty_thousand_tasks):
    assert_index_claim(plan_nodes(SEED_CLAIM))

    # recovery.leases' real statement: batch size, owner, default lease (x3).
    assert_index_claim(plan_nodes(leases_postgres.CLAIM_SQL, [50, "w1", 300, 300, 300]))

    # Without a usable index predicate the planner must scan: proves the check can fail.
    unindexed = SEED_CLAIM.replace(
        "state IN ('pending', 'retry_wait', 'leased')", "lease_owner <> 'nobody'"
    )
    with pytest.raises(AssertionError):
        assert_index_claim(plan_nodes(unindexed))
