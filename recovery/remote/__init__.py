"""The remote-job lifecycle shared by asynchronous providers (seeds 000, 001 and 003).

Submission and collection are separate phases, each safe to crash in, each its own module:
`submit` (record the job and its Attempt, hand the tasks to it: `remote`, COMMIT, then send;
an ambiguous send -> `unknown`, reconcile), `poll` (fenced lease on the job row, many jobs at
once), `importing` (items by (job, item_index), each task's outcome through the engine's
fenced commit, fenced by the job and the task's token), `handoff` (media results through the
outbox, to the consumer's acknowledgement, expired links and missing files; `acknowledge` is
its endpoint), `jobs` (what the phases share, and the reads), `steps` (what the engine's loops
call), `reconcile` (an operator's resolutions of unknown and lookup-failed jobs), `webhooks`
(Web Scraper Cloud's final-status notification, a hint to poll) and `cloud_sitemaps` (a Cloud
dataset's sitemap, created or updated from its file).
Providers implement recovery.providers.remote_base.RemoteProvider and never touch the database.

This package's face: the names the rest of the engine, the dashboard and the tests use.
"""

from recovery.outcomes import ErrorClass
from recovery.providers.remote_base import JobStatus, Poll, SubmitAmbiguous, SubmitRejected
from recovery.remote.handoff import (
    HandoffError,
    consumer_finished,
    fresh_result_url,
    refresh_media,
    regenerate_media,
    sync_handoffs,
)
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
    "HandoffError",
    "JobStatus",
    "Poll",
    "SubmitAmbiguous",
    "SubmitRejected",
    "adopt_early_receipts",
    "claim_due_polls",
    "consumer_finished",
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
    "refresh_media",
    "regenerate_media",
    "remote_work_possible",
    "step",
    "submit_claimed",
    "submit_step",
    "sync_handoffs",
    "worker_step",
]
