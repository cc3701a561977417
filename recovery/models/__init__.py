"""The recovery data model (seed 002's minimum recovery schema, plus remote jobs).

States change only through recovery.states.* (guarded UPDATEs); never assign `.state` and save.
Identities are enforced by the database: unique task_key, observation_key, (job, item_index).

One module per group of tables that change together: `runs` (datasets, runs, rerun batches,
partitions, rule results), `tasks` (tasks, attempts, observations, their versions, the task
counters), `outbox` (delivery events), `remote` (remote jobs, their items, webhook receipts),
`operations` (heartbeats, triage notes, the audit log, schedules), `latest` (each entity's
latest published observation), `sites` (each host's shared politeness slot and seats, each run's
robots.txt per origin, each listing's stated total). Every model is imported
here, so `from recovery.models import X` names any of them and Django's app registry finds
them all; table names stay `recovery_<model>`.
"""

from __future__ import annotations

from recovery.models.incidents import Incident
from recovery.models.latest import LatestObservation
from recovery.models.operations import AuditEntry, Schedule, TriageNote, WorkerHeartbeat
from recovery.models.outbox import OutboxEvent
from recovery.models.remote import RemoteJob, RemoteJobItem, WebhookReceipt
from recovery.models.runs import (
    Dataset,
    RecoveryBatch,
    Run,
    RunPartition,
    ShiftSample,
    ValidationResult,
)
from recovery.models.sites import HostSeat, HostSlot, ListingTotal, RobotsState
from recovery.models.tasks import Attempt, Observation, ObservationVersion, Task, TaskCountDelta

__all__ = [
    "Attempt",
    "AuditEntry",
    "Dataset",
    "HostSeat",
    "HostSlot",
    "Incident",
    "LatestObservation",
    "ListingTotal",
    "Observation",
    "ObservationVersion",
    "OutboxEvent",
    "RecoveryBatch",
    "RemoteJob",
    "RemoteJobItem",
    "RobotsState",
    "Run",
    "RunPartition",
    "Schedule",
    "ShiftSample",
    "Task",
    "TaskCountDelta",
    "TriageNote",
    "ValidationResult",
    "WebhookReceipt",
    "WorkerHeartbeat",
]
