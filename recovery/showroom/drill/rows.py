"""What the drill reads of a run's rows, as an operator would see them.

In: a run (and a partition). Out: the rows an export carries and the entity keys in them, the
keys a quarantine holds back, the count of rows valid as shown, and a candidate's diagnostics
(for a post-mortem when the figures look wrong). Held is read from the partitions' quarantine
(recovery.states.row_states): a row judged valid in a quarantined partition counts held.
"""

from __future__ import annotations

import json
from typing import Any


def exported_rows(run_id: int) -> list[dict[str, Any]]:
    from recovery.delivery import exports

    text = "".join(exports.stream(run_id, "jsonl"))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def row_keys(rows: list[dict[str, Any]]) -> set[str]:
    """The entity keys in exported rows (whatever the column is called, the SKU is in it)."""
    found = set()
    for row in rows:
        for value in row.values() if isinstance(row, dict) else ():
            if isinstance(value, str) and value.startswith("SKU-"):
                found.add(value)
            elif isinstance(value, dict):
                found |= row_keys([value])
    return found


def held_entity_keys(run_id: int, partition: str) -> set[str]:
    """Entity keys of the partition's rows that are not valid as shown (held or invalid)."""
    from recovery.models import Observation
    from recovery.states import row_states

    rows = Observation.objects.filter(run_id=run_id, partition=partition)
    return set(rows.filter(row_states.not_valid(run_id)).values_list("entity_key", flat=True))


def valid_rows(run_id: int, partition: str | None = None) -> int:
    """Rows valid as shown (what an export carries), of the run or of one partition."""
    from recovery.states import row_states

    rows = row_states.exportable(run_id)
    return (rows if partition is None else rows.filter(partition=partition)).count()


def candidate_diagnostics(run_id: int) -> dict[str, Any]:
    """How the run became a candidate (for a post-mortem when the figures look wrong)."""
    from django.db.models import Count

    from recovery import counters
    from recovery.models import AuditEntry, Observation, Task
    from recovery.states import row_states

    audit = [
        {"at": str(e.at), "action": e.action, "detail": e.detail}
        for e in AuditEntry.objects.filter(object_type="run", object_id=str(run_id)).order_by("at")
    ]
    activity = []
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT state, now() - xact_start, left(query, 120) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND xact_start IS NOT NULL"
            )
            activity = [[str(v) for v in row] for row in cursor.fetchall()]
    quarantined = sorted(row_states.held_partitions(run_id).values_list("name", flat=True))
    # Each partition's rows by state as shown: a quarantined partition's rows are all held.
    by_partition: dict[tuple[str, str], int] = {}
    for partition, verdict, n in (
        Observation.objects.filter(run_id=run_id)
        .values_list("partition", "validation_state")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        shown = row_states.HELD if partition in quarantined else verdict
        by_partition[partition, shown] = by_partition.get((partition, shown), 0) + n

    return {
        "partitions_quarantined": quarantined,
        "validation_by_partition": [[p, s, n] for (p, s), n in sorted(by_partition.items())],
        "open_transactions": activity,
        "audit": audit[:20],
        "validation_states": row_states.state_counts(run_id),
        "counters": counters.by_state(run_id),
        "task_states": dict(
            Task.objects.filter(run_id=run_id)
            .values_list("state")
            .annotate(n=Count("pk"))
            .order_by()
        ),
    }
