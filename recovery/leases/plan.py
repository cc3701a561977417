"""The pure part of the hot path: what a claim hands a worker (Claimed), how an outcome
becomes the task's next state and its attempt (plan_outcome: the retry table and the budgets),
who holds the tasks a commit moves (Holder), and the observation rows, child tasks and lost
lease details a commit writes. No SQL, no database: recovery.leases.sqlite and .postgres write
what these decide."""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from recovery import failures, keys
from recovery.delivery.corrections import ObservationRow
from recovery.failures import Action
from recovery.ops.incidents import PageResponse
from recovery.outcomes import ErrorClass, Outcome, TaskInput
from recovery.states.choices import TaskState
from recovery.verdicts import Rules

log = logging.getLogger(__name__)


def dt_result(value: datetime | str | None) -> datetime | None:
    if value is None:
        return None
    # SQLite hands back naive UTC datetimes (or text, depending on the column's declared type).
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def json_value(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """A JSON object column: SQLite hands back its text, PostgreSQL the decoded object."""
    if value is None:
        return {}
    if isinstance(value, str):
        decoded: dict[str, Any] = json.loads(value)
        return decoded
    return value


def canonical_json(payload: Any) -> str:
    """The one JSON spelling of a payload that payload_hash is computed over."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Claimed:
    """One task as this worker holds it: what the provider needs and what the commit fences on."""

    task_id: int
    task_key: str
    run_id: int
    url: str
    page_type: str
    partition: str
    depth: int
    navigation: dict[str, Any]
    attempt_count: int
    lease_token: int
    previous_state: str
    previous_owner: str  # set when an expired lease was taken over (its token is ours - 1)
    first_attempt_at: datetime | None
    recovery_batch_id: int | None
    dataset_id: int
    dataset: str
    provider: str
    window: str
    scraper_version: str
    lease_seconds: int
    max_attempts: int
    max_elapsed_seconds: int
    # Attempts lost with their worker (this claim's takeover included): attempt_count counts
    # them too, the retry budget does not (retry_attempts).
    crash_count: int = 0
    # Claims that ended deferred (Outcome.deferred): attempt_count counts them too, the retry
    # budget does not.
    deferred_count: int = 0
    # The worker's clock when the claim returned: the Attempt's started_at.
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def retry_attempts(self) -> int:
        """The attempts the retry budget counts: every claim but those lost with a worker and
        those that ended deferred."""
        return max(self.attempt_count - self.crash_count - self.deferred_count, 0)

    def task_input(self, spec: dict[str, Any] | None = None) -> TaskInput:
        return TaskInput(
            task_id=self.task_id,
            task_key=self.task_key,
            run_id=self.run_id,
            url=self.url,
            page_type=self.page_type,
            partition=self.partition,
            window=self.window,
            dataset=self.dataset,
            attempt_count=self.attempt_count,
            lease_token=self.lease_token,
            depth=self.depth,
            navigation=dict(self.navigation),
            spec=spec or {},
        )


def claimed_from_row(row: Sequence[Any], default_lease: int) -> Claimed:
    (
        task_id,
        task_key,
        run_id,
        url,
        page_type,
        partition,
        depth,
        navigation,
        attempt_count,
        lease_token,
        first_attempt_at,
        batch_id,
        crash_count,
        deferred_count,
        previous_state,
        previous_owner,
        dataset_id,
        dataset,
        provider,
        window,
        scraper_version,
        lease_seconds,
        max_attempts,
        max_elapsed,
    ) = row
    return Claimed(
        task_id=task_id,
        task_key=task_key,
        run_id=run_id,
        url=url,
        page_type=page_type,
        partition=partition,
        depth=depth,
        navigation=json_value(navigation),
        attempt_count=attempt_count,
        lease_token=lease_token,
        previous_state=previous_state,
        previous_owner=previous_owner if previous_state == TaskState.LEASED else "",
        first_attempt_at=dt_result(first_attempt_at),
        recovery_batch_id=batch_id,
        dataset_id=dataset_id,
        dataset=dataset,
        provider=provider,
        window=window,
        scraper_version=scraper_version,
        lease_seconds=int(lease_seconds or default_lease),
        max_attempts=max_attempts,
        max_elapsed_seconds=max_elapsed,
        crash_count=crash_count,
        deferred_count=deferred_count,
    )


@dataclass(slots=True)
class Plan:
    claimed: Claimed
    outcome: Outcome
    state: str  # target task state
    attempt_outcome: str
    error_class: str
    error_detail: str
    delay: float | None  # seconds until next_attempt_at (retry_wait only)
    artefact: dict[str, Any] | None
    attempt_id: uuid.UUID = field(default_factory=uuid.uuid4)
    payload_hash: str = ""
    # The rules its observations are judged by at commit (quality.verdicts), None: not judged.
    rules: Rules | None = None
    # A deferral (Outcome.deferred): retry_wait that the budgets do not count.
    deferred: bool = False


@dataclass(slots=True)
class CommitSummary:
    """What a commit_outcomes call did (counts by target state, plus the losers)."""

    states: dict[str, int] = field(default_factory=dict)
    lost: list[int] = field(default_factory=list)  # task ids whose lease had moved on
    observations: int = 0  # rows inserted or changed (an unchanged upsert is not counted)
    discovered: int = 0  # new child tasks (already-known keys are not counted)

    @property
    def committed(self) -> int:
        return sum(self.states.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "states": dict(self.states),
            "lost": len(self.lost),
            "observations": self.observations,
            "discovered": self.discovered,
        }


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds the tasks a commit moves, besides each task's own lease_token.

    A worker's lease (state leased, lease_owner = the worker) by default; a provider job's
    import (state remote, remote_job = the job); or a re-synchronisation of a completed job
    (Continue): the tasks are already committed and only their data may change, fenced by
    the token their job held (a task claimed or reset since then has another).
    """

    source: str = TaskState.LEASED
    remote_job: int | None = None

    @classmethod
    def job(cls, job_pk: int) -> Holder:
        return cls(TaskState.REMOTE, job_pk)

    @classmethod
    def resync(cls, job_pk: int) -> Holder:
        return cls(TaskState.COMMITTED, job_pk)

    def sql(self, table: str, worker_id: str) -> tuple[str, list[Any]]:
        """The holder's part of the fence's WHERE clause, and its parameters."""
        if self.source == TaskState.LEASED:
            return f"{table}.state = %s AND {table}.lease_owner = %s", [self.source, worker_id]
        if self.source == TaskState.REMOTE:
            return f"{table}.state = %s AND {table}.remote_job_id = %s", [
                self.source,
                self.remote_job,
            ]
        return f"{table}.state = %s", [self.source]


WORKER = Holder()


def plan_outcome(
    claimed: Claimed,
    outcome: Outcome,
    *,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> Plan:
    """Decide a task's next state from its outcome (the retry table + budgets). Pure."""
    now = now or datetime.now(UTC)
    if outcome.deferred:
        return _deferral(claimed, outcome)
    if outcome.error_class is None:  # a success (Outcome.ok)
        # A success may carry notes for triage (the browser provider's refused subresources).
        notes = failures.sanitise_artefact(outcome.artefact) if outcome.artefact else None
        return Plan(claimed, outcome, TaskState.COMMITTED, "committed", "", "", None, notes)
    error_class = str(outcome.error_class)
    rule = failures.rule_for(outcome.error_class)
    detail = outcome.error_detail[:2000]
    artefact = failures.sanitise_artefact(outcome.artefact, outcome.http_status)
    if rule.action in failures.RETRYING:
        if outcome.retry_after is not None and outcome.retry_after >= 0:
            delay = min(float(outcome.retry_after), float(settings.SALVAGE_RETRY_AFTER_CAP))
        else:
            delay = failures.backoff(
                claimed.retry_attempts,
                settings.SALVAGE_BACKOFF_BASE,
                settings.SALVAGE_BACKOFF_CAP,
                rng,
            )
        first = claimed.first_attempt_at or now
        elapsed_at_retry = (now - first).total_seconds() + delay
        # A crash (a lost lease taken over) is no failure of the page: it has its own budget
        # (the claim quarantines a crash loop), so a killed worker cannot make a page dead.
        counted = claimed.retry_attempts
        if counted >= claimed.max_attempts:
            reason = f"budget exhausted: {counted} of {claimed.max_attempts} attempts"
            if claimed.crash_count:
                reason += f" (and {claimed.crash_count} lost with a worker, not counted)"
        elif elapsed_at_retry > claimed.max_elapsed_seconds:
            reason = (
                f"budget exhausted: next try at {elapsed_at_retry:.0f}s after the first attempt "
                f"exceeds {claimed.max_elapsed_seconds}s"
            )
        else:
            return Plan(
                claimed,
                outcome,
                TaskState.RETRY_WAIT,
                "retry",
                error_class,
                detail,
                delay,
                artefact,
            )
        # The task keeps its real error class (a rerun selects "server_error", not "budget");
        # the dead state and the detail say the budget ran out.
        detail = f"{reason}; last error: {detail}" if detail else reason
        return Plan(claimed, outcome, TaskState.DEAD, "dead", error_class, detail, None, artefact)
    target = {
        Action.QUARANTINE: (TaskState.QUARANTINED, "quarantined"),
        Action.GONE: (TaskState.GONE, "gone"),
        Action.DEAD: (TaskState.DEAD, "dead"),
    }[rule.action]
    if rule.action == Action.QUARANTINE and artefact is None:
        artefact = {"status": outcome.http_status}
    return Plan(claimed, outcome, target[0], target[1], error_class, detail, None, artefact)


# A deferral waits at most this long before the page is looked at again (a week): a bound on a
# provider's arithmetic, not a policy (robots.txt's own bound is far shorter).
MAX_DEFERRAL = 7 * 86400.0


def _deferral(claimed: Claimed, outcome: Outcome) -> Plan:
    """The host asked us to wait: retry_wait after `retry_after`, whatever the budgets say.

    Not an attempt at the page, so neither budget counts it: the commit adds 1 to the task's
    deferred_count (retry_attempts leaves it out) and, while no counted attempt was made,
    clears first_attempt_at, so the elapsed budget starts at the first real attempt. The
    Attempt row is written all the same (outcome "deferred"), so every claim stays traceable.
    """
    delay = min(max(float(outcome.retry_after or 0.0), 0.0), MAX_DEFERRAL)
    return Plan(
        claimed,
        outcome,
        TaskState.RETRY_WAIT,
        "deferred",
        str(outcome.error_class or ""),
        outcome.error_detail[:2000],
        delay,
        failures.sanitise_artefact(outcome.artefact, outcome.http_status),
        deferred=True,
    )


def plan_observations(plan: Plan) -> list[ObservationRow]:
    """The observation rows of one outcome, in order, each with its verdict when the plan
    carries rules (recovery.verdicts); also sets the plan's payload_hash (its one
    observation's, or a hash over several)."""
    c = plan.claimed
    rules = plan.rules if plan.rules is not None and plan.rules.judged_at_commit else None
    out = []
    for obs in plan.outcome.observations:
        payload_json = canonical_json(obs.payload)
        digest = keys.payload_hash(payload_json)
        okey = keys.observation_key(c.dataset, obs.entity_key, c.window)
        if rules is None:
            out.append(ObservationRow(okey, obs.entity_key, payload_json, digest, plan))
            continue
        bits = rules.verdict(obs.payload, c.page_type)
        out.append(
            ObservationRow(
                okey, obs.entity_key, payload_json, digest, plan,
                bits, rules.state(bits), rules.digest,
            )
        )  # fmt: skip
    if len(out) == 1:
        plan.payload_hash = out[0].payload_hash
    elif out:
        plan.payload_hash = keys.payload_hash("\n".join(row.payload_hash for row in out))
    return out


def observation_rows(plans: list[Plan]) -> list[ObservationRow]:
    """The plans' observation rows deduplicated by key.

    Two tasks of one batch may report the same entity; one statement may not upsert a row
    twice (PostgreSQL refuses), so the later one wins, as it would in two transactions.
    Sorted by key so concurrent committers lock rows in the same order (no deadlock).
    """
    rows: dict[str, ObservationRow] = {}
    for plan in plans:
        for row in plan_observations(plan):
            rows[row.observation_key] = row
    return [rows[k] for k in sorted(rows)]


@dataclass(frozen=True, slots=True)
class Child:
    """A URL a task discovered, as the new task row its parent's commit inserts (the task
    table is the seen set: an already-known task_key inserts nothing)."""

    run_id: int
    task_key: str
    url: str
    page_type: str
    partition: str
    priority: int
    discovery: str
    parent_id: int
    depth: int
    navigation_json: str
    recovery_batch_id: int | None


def discovered_children(plan: Plan) -> list[Child]:
    """The child tasks of one outcome, in order; a URL that cannot be a task key is logged
    and left out (the parent still commits)."""
    c = plan.claimed
    children = []
    for found in plan.outcome.discovered:
        try:
            url = keys.canonical_url(found.url)
            tkey = keys.task_key(c.dataset, url, c.window, found.page_type)
        except keys.InvalidURL as exc:
            log.warning("task %s discovered an unusable URL: %s", c.task_id, exc)
            continue
        children.append(
            Child(
                run_id=c.run_id,
                task_key=tkey,
                url=url,
                page_type=found.page_type,
                partition=found.partition or c.partition,
                priority=found.priority,
                discovery=found.discovery,
                parent_id=c.task_id,
                depth=min(c.depth + 1, 32767),  # a smallint column
                navigation_json=canonical_json(found.navigation or {}),
                recovery_batch_id=c.recovery_batch_id,
            )
        )
    return children


def lost_detail(p: Plan) -> str:
    """The error_detail of the Attempt a commit records for a task whose lease moved on."""
    detail = (
        f"lost lease: token {p.claimed.lease_token} is no longer current; "
        f"outcome {p.attempt_outcome} discarded"
    )
    return f"{detail} ({p.error_detail})" if p.error_detail else detail


def internal_error(detail: str) -> Outcome:
    """The outcome recorded when a provider itself failed (a bug: quarantined for a human)."""
    return Outcome(error_class=ErrorClass.INTERNAL, error_detail=detail[:2000])


def page_incidents(plans: Sequence[Plan]) -> list[PageResponse]:
    """The page responses among these (won) plans that quarantined their task: each is kept as
    an Incident by the commit that quarantines it (seed 001 §04, for pages). A quarantine
    without a response (a crash loop, a provider's item) keeps none."""
    return [
        PageResponse(
            provider=p.claimed.provider,
            url=p.claimed.url,
            run_id=p.claimed.run_id,
            task_id=p.claimed.task_id,
            attempt_id=p.attempt_id,
            error_class=p.error_class,
            detail=p.error_detail,
            artefact=p.artefact,
            request_options={"page_type": p.claimed.page_type, "depth": p.claimed.depth},
        )
        for p in plans
        if p.state == TaskState.QUARANTINED
        and p.outcome.http_status is not None
        and p.artefact is not None
    ]
