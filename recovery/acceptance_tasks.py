"""Alias: queued items written before the merge name `recovery.acceptance_tasks.<name>`; the
entry points are recovery.tasks'. Remove once no such item can be waiting."""

from recovery.tasks import advance_runs, deliver_due, deliver_event

__all__ = ["advance_runs", "deliver_due", "deliver_event"]
