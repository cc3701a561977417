"""Claim, heartbeat and fenced commit: the hot path of the engine (seed 002's protocol).

- `claim(worker_id, limit)` takes up to `limit` due tasks in one short transaction: PostgreSQL
  `UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n) RETURNING`, SQLite a
  `BEGIN IMMEDIATE` transaction. A claim sets next_attempt_at = lease_until, so an expired
  lease is claimable through the same predicate and index (task_claim_idx): no reaper.
- `heartbeat(worker_id, claimed)` extends leases still held (owner + token match).
- `commit_outcomes(worker_id, claimed, outcomes)` writes each task's state, Attempt,
  observations and discovered children in one transaction, each task fenced by its holder
  (a worker's lease, or a provider job) and its own token.

One module per database (`sqlite`, `postgres`) writes what the pure `plan` decides;
`statements` holds the SQL both share. Lease expiry is judged by the database clock
(statement_timestamp() on PostgreSQL: the statement's start, not the enclosing transaction's
like now(); strftime('now') on SQLite), never by a worker's. The statements are raw SQL: the
ORM's per-row overhead was measured to be a large share of a batch commit
(research/perf-baselines.md). Counter deltas are recorded with recovery.counters.record in the
same transaction as the moves they count.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from django.conf import settings

from recovery import verdicts
from recovery.leases import crashes, postgres, sizing, sqlite
from recovery.leases.plan import (
    WORKER,
    Claimed,
    CommitSummary,
    Holder,
    canonical_json,
    internal_error,
    plan_outcome,
)
from recovery.leases.statements import due_sql, is_pg, touch_worker_row
from recovery.outcomes import Outcome
from recovery.states.choices import TaskState

__all__ = [
    "WORKER",
    "Claimed",
    "CommitSummary",
    "Holder",
    "canonical_json",
    "claim",
    "commit_outcomes",
    "due_sql",
    "heartbeat",
    "internal_error",
    "plan_outcome",
    "prepare_commit",
    "touch_worker",
]


def claim(worker_id: str, limit: int | None = None) -> list[Claimed]:
    """Lease up to `limit` due tasks (priority, then due time) to `worker_id`.

    Sets owner, lease_until (= next_attempt_at), lease_token + 1, attempt_count + 1 and
    first_attempt_at when unset; an expired lease taken over also adds 1 to crash_count, and
    is taken alone (recovery.leases.crashes). A page at the crash budget is quarantined here
    and not returned. Lease length: the dataset's lease_seconds, else its measured lease when
    it is "auto" (recovery.leases.sizing, refreshed here at most once a minute), else
    SALVAGE_LEASE_SECONDS.
    """
    limit = limit or settings.SALVAGE_CLAIM_BATCH
    sizing.refresh_due()
    lease = int(settings.SALVAGE_LEASE_SECONDS)
    if is_pg():
        claimed = postgres.claim(worker_id, limit, lease)
    else:
        claimed = sqlite.retry_locked(sqlite.claim, worker_id, limit, lease)
    return _quarantine_crash_loops(worker_id, claimed)


def _quarantine_crash_loops(worker_id: str, claimed: list[Claimed]) -> list[Claimed]:
    """A page whose workers died on it SALVAGE_CRASH_BUDGET times is quarantined as
    worker_crash_loop by this claim (the ordinary fenced commit), never handed out again."""
    budget = int(settings.SALVAGE_CRASH_BUDGET)
    loops = crashes.over_budget(claimed, budget)
    if not loops:
        return claimed
    outcomes = [crashes.crash_loop_outcome(c, budget) for c in loops]
    decided = datetime.now(UTC)
    for c in loops:
        # The verdict comes after the takeover's lost_lease attempt: the last attempt of the
        # task (what the quarantine page samples) is the one with the evidence.
        c.started_at = decided
    commit_outcomes(worker_id, loops, outcomes)
    return [c for c in claimed if c.crash_count < budget]


def heartbeat(worker_id: str, claimed: Sequence[Claimed]) -> set[int]:
    """Extend the leases this worker still holds; returns the task ids still held.

    A task missing from the answer was re-claimed by someone else (its token moved) or
    finished: the caller must stop working on it. An expired lease nobody took yet is still
    ours (the token did not move), so extending it is correct.
    """
    if not claimed:
        return set()
    if is_pg():
        held = postgres.heartbeat(worker_id, claimed)
    else:
        held = sqlite.retry_locked(sqlite.heartbeat_rows, worker_id, claimed)
    touch_worker_row(worker_id)
    return held


def touch_worker(worker_id: str, claimed: int = 0, committed: int = 0) -> None:
    """Record that a worker is alive (and what it did) in WorkerHeartbeat."""
    if is_pg():
        touch_worker_row(worker_id, claimed, committed)
    else:
        sqlite.retry_locked(touch_worker_row, worker_id, claimed, committed)


def commit_outcomes(
    worker_id: str,
    claimed: Sequence[Claimed],
    outcomes: Sequence[Outcome],
    *,
    rng: random.Random | None = None,
    holder: Holder = WORKER,
) -> CommitSummary:
    """Commit a batch of outcomes, each task fenced by its holder + its own lease token.

    Every observation write goes through here, a provider job's import included (`holder`:
    Holder.job, or Holder.resync for a Continue of a completed job), so a changed value of a
    published run always becomes a versioned correction (recovery.delivery.corrections).

    One transaction: the fenced state UPDATE first (so nothing of a stale worker is written),
    then the Attempt rows, the observation upserts, the discovered children and the counter
    deltas, only for the tasks whose fence matched. A task whose lease moved on gets an
    Attempt with outcome lost_lease and nothing else. Returns a CommitSummary.
    """
    return prepare_commit(worker_id, claimed, outcomes, rng=rng, holder=holder)()


def prepare_commit(
    worker_id: str,
    claimed: Sequence[Claimed],
    outcomes: Sequence[Outcome],
    *,
    rng: random.Random | None = None,
    holder: Holder = WORKER,
) -> Callable[[], CommitSummary]:
    """commit_outcomes in two halves: the plans, verdicts and (on PostgreSQL) the statement's
    parameters now, on the caller's thread; the returned function runs the transaction (on a
    pipelined worker's commit thread, recovery.commit_lane)."""
    if len(claimed) != len(outcomes):
        raise ValueError(f"{len(claimed)} claimed tasks but {len(outcomes)} outcomes")
    if not claimed:
        return CommitSummary  # nothing to write: running it gives an empty summary
    finished = datetime.now(UTC)
    plans = [
        plan_outcome(c, o, now=finished, rng=rng) for c, o in zip(claimed, outcomes, strict=True)
    ]
    # Each observation is judged here, once, by its run's rules (recovery.verdicts), so an
    # evaluation sums stored verdicts instead of judging and rewriting every row.
    if any(p.outcome.observations for p in plans):
        rules = verdicts.rules_for({(c.dataset_id, c.dataset) for c in claimed})
        for p in plans:
            p.rules = rules.get((p.claimed.dataset_id, p.claimed.dataset))
    if holder.source == TaskState.COMMITTED and any(p.state != TaskState.COMMITTED for p in plans):
        raise ValueError("a re-synchronisation commits only successful outcomes")
    if is_pg():
        return postgres.build_commit(worker_id, plans, finished, holder)
    return lambda: sqlite.retry_locked(sqlite.commit, worker_id, plans, finished, holder)
