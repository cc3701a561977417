"""Alias: queued items written before the merge name `recovery.remote_tasks.poll_remote_jobs`;
the entry point is recovery.tasks'. Remove once no such item can be waiting."""

from recovery.tasks import poll_remote_jobs

__all__ = ["poll_remote_jobs"]
