"""The remote-job lifecycle shared by asynchronous providers (seeds 000, 001 and 003).

Submission and collection are separate phases, each safe to crash in, each its own module:
`submit` (record the job and its Attempt, hand the tasks to it: `remote`, COMMIT, then send;
an ambiguous send -> `unknown`, reconcile), `poll` (fenced lease on the job row, many jobs at
once), `importing` (items by (job, item_index), each task's outcome through the engine's
fenced commit, fenced by the job and the task's token), `handoff` (media results through the
outbox), `jobs` (what the phases share, and the reads), `steps` (what the engine's loops call).
Providers implement recovery.providers.remote_base.RemoteProvider and never touch the database.

This package's face: the names the rest of the engine, the dashboard and the tests use.
"""

from recovery.providers.base import ErrorClass
from recovery.providers.remote_base import JobStatus, Poll, SubmitAmbiguous, SubmitRejected
from recovery.remote.handoff import fresh_result_url, sync_handoffs
from recovery.remote.importing import import_results
from recovery.remote.jobs import (
    adopt_early_receipts,
    create_job,
    credits_by_run,
    forget_presence,
    is_remote,
    mark_due,
    provider_for,
    reconcile_queue,
    remote_work_possible,
)
from recovery.remote.poll import claim_due_polls, poll_step, record_poll
from recovery.remote.steps import (
    dispatch_hook,
    gated_worker_step,
    has_due_work,
    has_live_jobs,
    step,
    worker_step,
)
from recovery.remote.submit import open_jobs, submit_claimed, submit_step

__all__ = [
    "ErrorClass",
    "JobStatus",
    "Poll",
    "SubmitAmbiguous",
    "SubmitRejected",
    "adopt_early_receipts",
    "claim_due_polls",
    "create_job",
    "credits_by_run",
    "dispatch_hook",
    "forget_presence",
    "fresh_result_url",
    "gated_worker_step",
    "has_due_work",
    "has_live_jobs",
    "import_results",
    "is_remote",
    "mark_due",
    "open_jobs",
    "poll_step",
    "provider_for",
    "reconcile_queue",
    "record_poll",
    "remote_work_possible",
    "step",
    "submit_claimed",
    "submit_step",
    "sync_handoffs",
    "worker_step",
]
