"""Which archived page a claimed task re-extracts, and where a batch's pages came from.

An attempt that fetched a page records the archive blob in its artefact JSON,
`{"archive": {"sha256": ..., "source": "fetched"}}` (or `"skipped": why` when it was not
stored); an attempt that re-extracted one records `"source": "archive"` with the same name.
No new table: the Attempt row is already written in the commit transaction that records the
outcome, so the pointer commits with the observations it explains, or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from recovery.models import Attempt, RecoveryBatch

ARCHIVE = "archive"
FETCHED = "fetched"


def archived_pages(claimed: Iterable[tuple[int, int | None]]) -> dict[int, str]:
    """{task id: blob name} for the claimed (task id, recovery batch id) pairs that belong to
    "re-extract from the archive" batches: the page their latest archiving attempt stored.
    Other tasks are absent (fetched).

    No query at all for a batch of first-pass tasks (the hot path); at most two otherwise,
    served by attempt_task_time_idx. Whether the blob still exists is the provider's check
    (a missing or expired one is fetched)."""
    pairs = list(claimed)
    batch_ids = {batch for _task, batch in pairs if batch is not None}
    if not batch_ids:
        return {}
    from_archive = set(
        RecoveryBatch.objects.filter(pk__in=batch_ids, from_archive=True).values_list(
            "pk", flat=True
        )
    )
    task_ids = [task for task, batch in pairs if batch in from_archive]
    if not task_ids:
        return {}
    found: dict[int, str] = {}
    rows = (
        Attempt.objects.filter(task_id__in=task_ids, artefact__archive__sha256__isnull=False)
        .order_by("task_id", "-started_at")
        .values_list("task_id", "artefact")
    )
    for task_id, artefact in rows:
        name = ((artefact or {}).get("archive") or {}).get("sha256")
        if task_id not in found and isinstance(name, str) and name:
            found[task_id] = name
    return found


@dataclass(frozen=True)
class Sources:
    """A batch's pages by where they came from: re-extracted from the archive, or fetched
    (the batch does not re-extract, or the page's blob was missing, expired or never stored)."""

    archive: int
    fetched: int


def batch_sources(batch: RecoveryBatch) -> Sources:
    """Tasks of the batch with an attempt from the archive, and the others that were fetched
    (each task once, whatever its retries). Two counts in the database over the batch's
    attempts (attempt_batch_idx): the batch page refreshes while the batch runs.

    The two are disjoint: a page read from the archive is a 2xx page, so its one attempt ends
    it (committed or quarantined), never to be retried by fetching."""
    # A lost lease's attempt was rolled back, and a deferral fetched nothing.
    attempts = Attempt.objects.filter(recovery_batch_id=batch.pk).exclude(
        outcome__in=(Attempt.Outcome.LOST_LEASE, Attempt.Outcome.DEFERRED)
    )
    tasks = attempts.order_by().values("task_id").distinct()
    archive = tasks.filter(artefact__archive__source=ARCHIVE).count()
    return Sources(archive=archive, fetched=tasks.count() - archive)
