"""The claim -> execute -> commit loop, as steps that return "did work".

`run_batch` is one step: claim up to N tasks (recovery.leases), run them through each
dataset's provider concurrently on this process's event loop, heartbeat while that takes long,
and commit every outcome fenced by its own lease token. `run_forever` loops over steps for
`manage.py work`; `recovery.tasks.run_batch_task` runs one step per django-q2 wake-up.

The other steps of the loop are written out below (STEPS, IDLE_CHECKS), not registered at
import time, so the import graph shows who drives what and a typo fails at import:
- STEPS: fn(worker_id) -> bool, run every loop iteration after run_batch (advance runs through
  acceptance; send, poll and import remote jobs, so a restarted worker resumes them at once).
- IDLE_CHECKS: fn() -> bool, True while other work is outstanding, so that `--until-idle`
  does not stop early. Expired task leases need no hook: the claim predicate takes them
  (never infer completion from a process exit).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django import db
from django.conf import settings
from django.db import connection

from recovery import faults, leases, remote, verdicts
from recovery.archive import pages as archive_pages
from recovery.commit_lane import CommitLane
from recovery.fetch import servant
from recovery.leases import Claimed, CommitSummary, due_sql
from recovery.ops.liveness import new_worker_id
from recovery.outcomes import Outcome, TaskInput
from recovery.providers import get_provider, known
from recovery.providers.base import Provider
from recovery.quality import acceptance_steps
from recovery.states.choices import TaskState
from recovery.states.task import TERMINAL as FINAL_STATES

log = logging.getLogger(__name__)

StepFn = Callable[[str], bool]
# After each batch: advance runs (acceptance, outbox), then send, poll and import remote jobs
# (skipped while no remote job or remote dataset exists: recovery.remote.jobs).
STEPS: tuple[StepFn, ...] = (acceptance_steps.advance_step, remote.gated_worker_step)
# Before `--until-idle` stops: one more advance, and no remote job still live.
IDLE_CHECKS: tuple[Callable[[], bool], ...] = (
    acceptance_steps.advance_before_idle,
    remote.has_live_jobs,
)

ProviderFactory = Callable[[str, dict[str, Any]], Provider]


# --- one event loop per process ----------------------------------------------------------------
# Providers keep async clients (connection pools) bound to a loop, so the loop lives as long
# as the process, in a daemon thread. Database work stays on the calling thread: the Django
# connection, its transactions and the test database all belong to that thread.

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid: int | None = None
_providers: dict[tuple[str, str], Provider] = {}


def _event_loop() -> asyncio.AbstractEventLoop:
    global _loop, _loop_pid
    with _loop_lock:
        # After a fork (django-q2 workers) the parent's thread does not exist here: start anew.
        if _loop is None or _loop_pid != os.getpid():
            if _loop_pid != os.getpid() and _loop_pid is not None:
                # The parent's providers belong to its loop. On the first call there are none
                # to drop: the provider the first batch just made must stay cached, or it is
                # never closed ("Unclosed client session" at exit).
                _providers.clear()
            _loop = asyncio.new_event_loop()
            _loop_pid = os.getpid()
            threading.Thread(target=_loop.run_forever, name="salvage-loop", daemon=True).start()
        return _loop


def default_provider_factory(name: str, options: dict[str, Any]) -> Provider:
    """One provider instance per (name, options) per process, reused across batches."""
    key = (name, json.dumps(options, sort_keys=True, default=str))
    provider = _providers.get(key)
    if provider is None:
        provider = get_provider(name, **options)
        _providers[key] = provider
    return provider


def close_providers() -> None:
    """Close every cached provider (on a clean worker exit)."""
    if _loop is None or _loop_pid != os.getpid():
        return
    for provider in list(_providers.values()):
        try:
            asyncio.run_coroutine_threadsafe(provider.aclose(), _loop).result(timeout=10)
        except Exception:
            log.exception("closing provider %s failed", getattr(provider, "name", provider))
    _providers.clear()


# --- datasets (spec + provider options), cached briefly ----------------------------------------

_DATASET_TTL = 2.0
_datasets: dict[int, tuple[float, tuple[str, str], dict[str, Any]]] = {}


def _dataset_info(claimed: list[Claimed]) -> dict[int, tuple[str, dict[str, Any]]]:
    """{dataset id: (provider name, spec)}; specs are cached for a moment per process.

    The provider name comes from the claim itself (always current); a cached spec is used
    only while its dataset still has the same name and provider (ids can be reused in tests).
    """
    from recovery.models import Dataset

    now = time.monotonic()
    wanted = {c.dataset_id: (c.dataset, c.provider) for c in claimed}

    def fresh(pk: int) -> bool:
        entry = _datasets.get(pk)
        return bool(entry and now - entry[0] <= _DATASET_TTL and entry[1] == wanted[pk])

    missing = [pk for pk in wanted if not fresh(pk)]
    if missing:
        for pk, name, provider, spec in Dataset.objects.filter(pk__in=missing).values_list(
            "pk", "name", "provider", "spec"
        ):
            _datasets[pk] = (now, (name, provider), spec or {})
            verdicts.remember(pk, name, spec)  # the commit judges by these (no second read)
    return {
        pk: (provider, _datasets[pk][2] if pk in _datasets else {})
        for pk, (_name, provider) in wanted.items()
    }


# --- execution ---------------------------------------------------------------------------------


async def _execute_group(
    provider: Provider, inputs: list[TaskInput], concurrency: int, lost: set[int]
) -> list[Outcome]:
    async def call(batch: list[TaskInput]) -> list[Outcome]:
        try:
            outcomes = await provider.execute_many(batch)
        except Exception as exc:  # a provider bug must not lose the batch: quarantine it
            log.exception("provider %s failed", getattr(provider, "name", provider))
            return [leases.internal_error(f"provider raised {exc!r}") for _ in batch]
        if len(outcomes) != len(batch):
            detail = f"provider returned {len(outcomes)} outcomes for {len(batch)} tasks"
            return [leases.internal_error(detail) for _ in batch]
        return list(outcomes)

    if len(inputs) <= concurrency:
        return await call(inputs)
    # More tasks than the concurrency: `concurrency` lanes take one task at a time, so a slow
    # page never holds back a whole chunk, and a task whose lease was lost is never started.
    results: list[Outcome | None] = [None] * len(inputs)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(inputs)):
        queue.put_nowait(i)

    async def lane() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            if inputs[i].task_id in lost:
                results[i] = leases.internal_error("lease lost before the task started")
                continue
            results[i] = (await call([inputs[i]]))[0]

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return [r for r in results if r is not None]


async def _execute_all(
    groups: list[tuple[Provider | None, list[TaskInput], str]], concurrency: int, lost: set[int]
) -> list[list[Outcome]]:
    async def one(provider, inputs, problem):
        if provider is None:
            return [leases.internal_error(problem) for _ in inputs]
        return await _execute_group(provider, inputs, concurrency, lost)

    return await asyncio.gather(*(one(p, i, e) for p, i, e in groups))


def execute(
    worker_id: str,
    claimed: list[Claimed],
    *,
    concurrency: int | None = None,
    provider_factory: ProviderFactory | None = None,
) -> list[Outcome]:
    """Run claimed tasks through their datasets' providers; heartbeat while it takes long.

    Returns one Outcome per claimed task, in order. A batch may mix datasets: each dataset's
    group goes to its own provider, all groups at once.
    """
    concurrency = concurrency or settings.SALVAGE_CONCURRENCY
    factory = provider_factory or default_provider_factory
    info = _dataset_info(claimed)
    # Tasks of a "from the archive" recovery batch re-extract their stored page (no query
    # unless the batch holds tasks of a recovery batch: recovery.archive.pages).
    archived = archive_pages.archived_pages((c.task_id, c.recovery_batch_id) for c in claimed)
    by_dataset: dict[int, list[int]] = defaultdict(list)
    for index, c in enumerate(claimed):
        by_dataset[c.dataset_id].append(index)
    groups: list[tuple[Provider | None, list[TaskInput], str]] = []
    order: list[list[int]] = []
    for dataset_id, indexes in by_dataset.items():
        provider_name, spec = info.get(dataset_id, (claimed[indexes[0]].provider, {}))
        problem = ""
        try:
            provider = factory(provider_name, dict(spec.get("provider_options") or {}))
        except Exception as exc:  # unknown provider, bad options: quarantine, never spin
            provider, problem = None, f"cannot create provider {provider_name!r}: {exc}"
        inputs = [claimed[i].task_input(spec) for i in indexes]
        for task_input in inputs:
            task_input.archived = archived.get(task_input.task_id, "")
        groups.append((provider, inputs, problem))
        order.append(indexes)

    lost: set[int] = set()
    interval = max(0.2, min(c.lease_seconds for c in claimed) / 3)
    # While the batch runs, this thread serves the providers' database calls (a host's shared
    # politeness turn, robots.txt's shared state: recovery.fetch.servant), heartbeating between.
    # Served from before the batch starts: its first coroutines call at once.
    with servant.serving() as serving:
        future = asyncio.run_coroutine_threadsafe(
            _execute_all(groups, concurrency, lost), _event_loop()
        )
        while not serving.serve(future, interval):
            # Long batch: extend our leases. A task we no longer hold is not started (lanes
            # check `lost`) and its outcome will be fenced out at commit (lost_lease attempt).
            still = [c for c in claimed if c.task_id not in lost]
            held = leases.heartbeat(worker_id, still)
            newly_lost = [c.task_id for c in still if c.task_id not in held]
            if newly_lost:
                log.warning(
                    "worker %s: heartbeat refused for %d tasks (lease moved on): %s",
                    worker_id,
                    len(newly_lost),
                    newly_lost[:20],
                )
                lost.update(newly_lost)
    results = future.result()
    outcomes: list[Outcome | None] = [None] * len(claimed)
    for indexes, group_outcomes in zip(order, results, strict=True):
        for i, outcome in zip(indexes, group_outcomes, strict=True):
            outcomes[i] = outcome
    return [o for o in outcomes if o is not None]


@dataclass(slots=True)
class BatchResult:
    """What one step did; truthy when it did work (it claimed or committed something)."""

    claimed: int = 0
    summary: CommitSummary = field(default_factory=CommitSummary)
    seconds: float = 0.0
    handed_over: bool = False  # tasks went to remote jobs (recovery.remote) instead
    # Pipelined (run_forever on PostgreSQL): tasks claimed and executed by this step whose
    # commit is still running on the commit lane; the figures above are the previous batch's.
    in_flight: int = 0

    def __bool__(self) -> bool:
        return self.claimed > 0 or self.handed_over or self.in_flight > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "claimed": self.claimed,
            "seconds": round(self.seconds, 3),
            **self.summary.as_dict(),
        }


@dataclass(slots=True)
class Executed:
    """A batch claimed and run, not yet committed."""

    claimed: list[Claimed]
    outcomes: list[Outcome]
    started: float


def _hand_over_remote(worker_id: str, claimed: list[Claimed]) -> list[Claimed]:
    """Tasks of remote-job datasets go to recovery.remote (record the job, then send) instead
    of execute_many; it fences them with our lease tokens. Returns the tasks left for us."""
    names = {c.provider for c in claimed}
    remote_names = {name for name in names if remote.is_remote(name)}
    if not remote_names:
        return claimed
    info = _dataset_info(claimed)
    handed = [c for c in claimed if c.provider in remote_names]
    remote.submit_claimed(
        worker_id, [c.task_input(info.get(c.dataset_id, ("", {}))[1]) for c in handed]
    )
    return [c for c in claimed if c.provider not in remote_names]


def _claim_and_execute(
    worker_id: str,
    provider_factory: ProviderFactory | None,
    batch_size: int | None,
    concurrency: int | None,
    before_execute: Callable[[list[Claimed]], None] | None = None,
) -> Executed | BatchResult:
    """Claim and run a batch; a BatchResult instead when there is nothing to commit (nothing
    claimed, or every task handed over to remote jobs)."""
    started = time.monotonic()
    claimed = leases.claim(worker_id, batch_size)
    if not claimed:
        return BatchResult()
    faults.point("after_claim")
    claimed = _hand_over_remote(worker_id, claimed)
    if not claimed:
        return BatchResult(0, CommitSummary(), time.monotonic() - started, handed_over=True)
    if before_execute is not None:
        before_execute(claimed)
    outcomes = execute(
        worker_id, claimed, concurrency=concurrency, provider_factory=provider_factory
    )
    faults.point("after_fetch", [c.url for c in claimed])  # (URLs: a poison page's fault)
    return Executed(claimed, outcomes, started)


def _commit(done: Executed, run_commit: Callable[[], CommitSummary]) -> BatchResult:
    summary = run_commit()  # leases.prepare_commit's transaction
    # django-q2 acknowledges the wake-up only after the task function returns, so a kill here
    # is "after commit, before acknowledgement": redelivery must find nothing to redo.
    faults.point("after_commit")
    return BatchResult(len(done.claimed), summary, time.monotonic() - done.started)


def run_batch(
    worker_id: str,
    provider_factory: ProviderFactory | None = None,
    batch_size: int | None = None,
    concurrency: int | None = None,
) -> BatchResult:
    """One step: claim up to batch_size, execute, commit. Truthy when it did work."""
    done = _claim_and_execute(worker_id, provider_factory, batch_size, concurrency)
    if isinstance(done, BatchResult):
        return done
    return _commit(done, leases.prepare_commit(worker_id, done.claimed, done.outcomes))


def run_pipelined_batch(
    worker_id: str,
    lane: CommitLane[BatchResult],
    provider_factory: ProviderFactory | None = None,
    batch_size: int | None = None,
    concurrency: int | None = None,
) -> BatchResult:
    """One pipelined step: claim and execute a batch while the previous batch commits on
    `lane`, then hand this batch to the lane. Returns what the previous commit did, with this
    batch as `in_flight`; `lane.close()` collects the last commit.

    A batch with a suspect page (crash_count > 0: it may have killed a worker) runs only
    after the previous commit has finished, so that a poison page cannot take a finished
    batch's commit down with its worker (recovery.leases.crashes).
    """

    def wait_if_suspect(claimed: list[Claimed]) -> None:
        if any(c.crash_count for c in claimed):
            lane.settle()

    done = _claim_and_execute(
        worker_id, provider_factory, batch_size, concurrency, before_execute=wait_if_suspect
    )
    result = lane.wait() or BatchResult()
    if isinstance(done, BatchResult):  # nothing to commit: the previous batch's figures
        result.handed_over = result.handed_over or done.handed_over
        return result
    # The commit's Python half here, while the event loop is idle; only the transaction on
    # the lane, where it overlaps the next batch.
    run_commit = leases.prepare_commit(worker_id, done.claimed, done.outcomes)
    lane.submit(lambda: _commit(done, run_commit))
    result.in_flight = len(done.claimed)
    return result


def has_due_work(within_seconds: float = 0.0) -> bool:
    """Is any task claimable now, or within `within_seconds` (database clock)?"""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM recovery_task WHERE {due_sql(ahead=True)} LIMIT 1",
            [float(within_seconds)],
        )
        return cursor.fetchone() is not None


@dataclass(slots=True)
class LoopStats:
    """What a worker loop did (`manage.py work`'s summary line and progress display).

    Claims and attempts are not tasks: a task retried twice is claimed three times and
    records three attempts. `ended` counts tasks by the final state their attempt left them
    in (committed, quarantined, gone, dead), each task once; `retried` the attempts after
    which the task waits to be claimed again."""

    batches: int = 0
    claims: int = 0
    attempts: int = 0
    retried: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    lost: int = 0

    @property
    def committed(self) -> int:
        """Tasks committed (not attempts: each of them is committed once)."""
        return self.ended.get(TaskState.COMMITTED, 0)

    def summary(self) -> str:
        """`manage.py work`'s last line: tasks and attempts counted apart."""
        final = (TaskState.COMMITTED, TaskState.QUARANTINED, TaskState.GONE, TaskState.DEAD)
        ended = ", ".join(f"{self.ended.get(state, 0)} {state}" for state in final)
        return (
            f"{self.batches} batches, {self.claims} claims, {self.attempts} attempts "
            f"({self.retried} to retry), {self.lost} lost leases; tasks ended: {ended}"
        )


def run_forever(
    worker_id: str | None = None,
    *,
    batch_size: int | None = None,
    concurrency: int | None = None,
    until_idle: bool = False,
    idle_wait: float | None = None,
    stop: threading.Event | None = None,
    provider_factory: ProviderFactory | None = None,
    extra_steps: tuple[StepFn, ...] = (),
    stats: LoopStats | None = None,
) -> LoopStats:
    """The foreground worker loop (`manage.py work`).

    Counts into `stats` as it goes, so a caller that runs the loop again after a database
    outage (which ends it with an exception) keeps what was done before.

    Each iteration runs a batch, then STEPS, then `extra_steps` (this loop's own, e.g. the
    terminal progress display of recovery.ops.progress.watch_worker).

    Stops when `stop` is set (SIGTERM/SIGINT: the current step finishes first), or with
    `until_idle` when no task is due within `idle_wait` seconds (default: the lease length,
    so a crashed worker's leases are waited for) and no extra step reports work.
    """
    worker_id = worker_id or new_worker_id()
    stop = stop or threading.Event()
    idle_wait = float(settings.SALVAGE_LEASE_SECONDS if idle_wait is None else idle_wait)
    stats = LoopStats() if stats is None else stats
    # Import every provider module now, not inside the first batch's timings and lease.
    known()
    remote.forget_presence()  # a new loop asks the database whether remote work exists
    leases.touch_worker(worker_id)
    last_touch = time.monotonic()
    sleep = 0.05
    # A loop with nothing to claim backs off to one poll a second. `--until-idle` waits only for
    # other workers' batches in flight (their commits end the run or bring new tasks), and a
    # second's back-off kept every one-shot worker alive up to a second after the last commit.
    poll_cap = 0.1 if until_idle else 1.0
    lane: CommitLane[BatchResult] | None = CommitLane() if pipelines() else None
    try:
        while not stop.is_set():
            if not connection.in_atomic_block:  # (a test's transaction must stay open)
                db.close_old_connections()  # drop a broken or too-old connection between steps
            if lane is None:
                result = run_batch(worker_id, provider_factory, batch_size, concurrency)
            else:
                result = run_pipelined_batch(
                    worker_id, lane, provider_factory, batch_size, concurrency
                )
            did = bool(result)
            _count(stats, result)
            for step in (*STEPS, *extra_steps):
                did = bool(step(worker_id)) or did
            if did:
                sleep = 0.05
                continue
            if until_idle and not has_due_work(idle_wait) and not any(c() for c in IDLE_CHECKS):
                break
            if time.monotonic() - last_touch > 10:
                leases.touch_worker(worker_id)
                last_touch = time.monotonic()
            stop.wait(sleep)
            sleep = min(sleep * 2, poll_cap)
    finally:
        try:
            if lane is not None:  # the last batch's commit: a stop lets it finish
                _count(stats, lane.close())
        finally:
            close_providers()
    return stats


def pipelines() -> bool:
    """Does run_forever pipeline its batches (recovery.commit_lane)? On PostgreSQL, unless
    SALVAGE_PIPELINE_COMMITS is off; never inside a transaction (a test's), whose rows a
    second connection could not see; SQLite has one writer at a time, so no gain there."""
    return bool(
        settings.SALVAGE_PIPELINE_COMMITS
        and connection.vendor == "postgresql"
        and not connection.in_atomic_block
    )


def _count(stats: LoopStats, result: BatchResult | None) -> None:
    if result is None or not result.claimed:
        return
    stats.batches += 1
    stats.claims += result.claimed
    # summary.committed is every task the commit moved, one attempt each, whatever its state.
    stats.attempts += result.summary.committed
    for state, n in result.summary.states.items():
        if state in FINAL_STATES:
            stats.ended[state] = stats.ended.get(state, 0) + n
        else:
            stats.retried += n
    stats.lost += len(result.summary.lost)


def run_until_idle(
    worker_id: str | None = None,
    *,
    batch_size: int | None = None,
    concurrency: int | None = None,
    idle_wait: float = 0.0,
    provider_factory: ProviderFactory | None = None,
) -> LoopStats:
    """Work until nothing is due within `idle_wait` seconds (tests and one-shot commands)."""
    return run_forever(
        worker_id,
        batch_size=batch_size,
        concurrency=concurrency,
        until_idle=True,
        idle_wait=idle_wait,
        provider_factory=provider_factory,
    )
