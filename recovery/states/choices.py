"""The choices the models store for each state machine, and the kinds of process that beat.

The ground floor of the engine: `models` imports these, and each machine's module
(`states/task.py`, `run.py`, `remote_job.py`, `delivery.py`) imports them with its moves, so
no module below the models needs the models to name a state.
"""

from __future__ import annotations

from django.db import models


class TaskState(models.TextChoices):
    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    REMOTE = "remote"
    COMMITTED = "committed"
    QUARANTINED = "quarantined"
    GONE = "gone"
    DEAD = "dead"


# In this order in the claim index's condition (models.Task, task_claim_idx) and the claim SQL.
CLAIMABLE_ORDER = (TaskState.PENDING, TaskState.RETRY_WAIT, TaskState.LEASED)


class RunState(models.TextChoices):
    COLLECTING = "collecting"
    CANDIDATE = "candidate"
    ACCEPTED = "accepted"
    PUBLISHED = "published"
    REJECTED = "rejected"


class RemoteJobState(models.TextChoices):
    CREATED = "created"
    SUBMITTED = "submitted"
    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"
    REVOKED = "revoked"
    UNKNOWN = "unknown"
    LOOKUP_FAILED = "lookup_failed"
    REPLACED = "replaced"
    DISMISSED = "dismissed"


class DeliveryState(models.TextChoices):
    UNSENT = "unsent"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"
    UNCERTAIN = "uncertain"


class HandoffState(models.TextChoices):
    """A media result's handoff to its consumer (RemoteJob.handoff_state, seed 003): the
    delivery machine's states while the outbox delivers it, then what follows delivery."""

    UNSENT = "unsent"
    SENDING = "sending"
    DELIVERED = "delivered"  # the destination accepted the handoff
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    FINISHED = "finished"  # the consumer acknowledged it is done with the result
    MISSING = "missing"  # the provider answers 404/410 for the stored object: it is gone
    REGENERATED = "regenerated"  # an operator ordered a new (paid) job to make it again


class WorkerKind(models.TextChoices):
    WORK = "work", "work loop"
    QCLUSTER = "qcluster", "django-q2 cluster"
    DISPATCH = "dispatch", "dispatcher"
    DELIVER = "deliver", "delivery loop"
