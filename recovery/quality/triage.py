"""Triage: operators' notes and "reviewed" marks on quarantined partitions and tasks.

Each function opens its own transaction and writes an audit entry in it, so a note or a mark
never exists without the record of who made it and why.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from recovery import audit
from recovery.models import Run, RunPartition, Task, TriageNote

MAX_NOTE_LENGTH = 5000


class TriageError(ValueError):
    """Bad triage input (unknown run, partition or task; empty note)."""


def add_note(
    run_id: int, actor: str, text: str, partition: str = "", task_id: int | None = None
) -> TriageNote:
    text = (text or "").strip()
    if not text:
        raise TriageError("a note needs some text")
    if len(text) > MAX_NOTE_LENGTH:
        raise TriageError(f"a note is at most {MAX_NOTE_LENGTH} characters")
    with transaction.atomic():
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            raise TriageError(f"run {run_id} does not exist")
        if task_id is not None:
            task = Task.objects.filter(pk=task_id, run_id=run_id).first()
            if task is None:
                raise TriageError(f"task {task_id} is not in run {run_id}")
            partition = partition or task.partition
        elif partition and not _partition_exists(run_id, partition):
            raise TriageError(f"partition {partition!r} is not in run {run_id}")
        note = TriageNote.objects.create(
            run_id=run_id, partition=partition, task_id=task_id, author=actor, text=text
        )
        audit.record(actor, "add_note", note, text, run=run_id, partition=partition, task=task_id)
    return note


def mark_reviewed(run_id: int, partition: str, actor: str) -> RunPartition:
    """Mark a partition as reviewed by `actor` (creates its RunPartition row if missing)."""
    with transaction.atomic():
        if not Run.objects.filter(pk=run_id).exists():
            raise TriageError(f"run {run_id} does not exist")
        if not _partition_exists(run_id, partition):
            raise TriageError(f"partition {partition!r} is not in run {run_id}")
        row, _ = RunPartition.objects.get_or_create(run_id=run_id, name=partition)
        now = timezone.now()
        RunPartition.objects.filter(pk=row.pk).update(reviewed_by=actor, reviewed_at=now)
        row.reviewed_by, row.reviewed_at = actor, now
        audit.record(actor, "mark_reviewed", row, "", run=run_id, partition=partition)
    return row


def _partition_exists(run_id: int, partition: str) -> bool:
    # Uses the (run, partition, state) index: one index probe, never a count.
    return (
        Task.objects.filter(run_id=run_id, partition=partition).exists()
        or RunPartition.objects.filter(run_id=run_id, name=partition).exists()
    )
