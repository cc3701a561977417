"""Worker liveness: every process's heartbeat row, and the one definition of alive/stale/gone.

Each long-running process (`manage.py work`, each `qcluster` and each of its django-q2 worker
processes, `dispatch`, `deliver`) keeps a row in WorkerHeartbeat and refreshes `last_seen` from
a small daemon thread every SALVAGE_HEARTBEAT_SECONDS, busy or idle: a worker blocked on an
empty queue is alive, and a page must be able to say so. The claim and commit counters in the
same row are written by recovery.leases.

Status, by the database clock's `last_seen` (read with the web server's clock; they share a
host or NTP):
- alive: seen within SALVAGE_WORKER_ALIVE_SECONDS (three missed beats by default);
- stale: not seen for longer than that, but for less than SALVAGE_WORKER_GONE_SECONDS: it may be
  frozen, swapping or stuck in a step; its leases expire by themselves;
- gone: not seen for SALVAGE_WORKER_GONE_SECONDS, or it said goodbye (`stopped_at`) on a clean
  exit.
The workers page, /metrics (`salvage_workers_alive{kind}`) and the dashboard's figures all
count through `alive_q` and `status`, so the thresholds exist once.

A *task worker* is a process that runs tasks: a `work` loop, or a `qcluster` (its main process
and each of its django-q2 worker processes). The dispatcher and the delivery loop run none, so
with only them alive no task is done: the run page's ETA and the "no task worker" alert count
task workers only (`TASK_WORKER_KINDS`).

A provider job's import commits under the label `remote:<job id>`
(recovery.remote.jobs.worker_label), and the commit's upsert gives that label a row here too. It
is no process: it never beats again, so it read as a worker alive for 30 s, then stale, then
gone. Every reader of workers starts from `processes()`, which leaves those rows out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, connection
from django.db.models import Q, QuerySet, TextChoices
from django.db.models.functions import Now
from django.utils import timezone

from recovery.ops.outage import DATABASE_ERRORS, close_connections
from recovery.states.choices import WorkerKind

if TYPE_CHECKING:
    from recovery.models import WorkerHeartbeat

log = logging.getLogger(__name__)


# The worker label of a provider job's import (recovery.remote.jobs.worker_label): not a process.
REMOTE_JOB_PREFIX = "remote:"

# The kinds of process that claim and run tasks (see the module docstring).
TASK_WORKER_KINDS = (WorkerKind.WORK, WorkerKind.QCLUSTER)


class Status(TextChoices):
    ALIVE = "alive"
    STALE = "stale"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Thresholds:
    heartbeat: float  # seconds between beats
    alive: float  # seen within this: alive
    gone: float  # not seen for this (or said goodbye): gone; in between: stale

    def legend(self) -> list[tuple[str, str]]:
        return [
            (
                Status.ALIVE,
                f"a heartbeat in the last {_secs(self.alive)} (beats every "
                f"{_secs(self.heartbeat)}, busy or idle)",
            ),
            (
                Status.STALE,
                f"no heartbeat for more than {_secs(self.alive)}: frozen, overloaded "
                "or killed; its leases expire by themselves",
            ),
            (Status.GONE, f"no heartbeat for {_secs(self.gone)}, or it stopped cleanly"),
        ]


def _secs(value: float) -> str:
    if value >= 120 and value % 60 == 0:
        return f"{int(value // 60)} min"
    return f"{value:g} s"


def thresholds() -> Thresholds:
    return Thresholds(
        heartbeat=float(settings.SALVAGE_HEARTBEAT_SECONDS),
        alive=float(settings.SALVAGE_WORKER_ALIVE_SECONDS),
        gone=float(settings.SALVAGE_WORKER_GONE_SECONDS),
    )


def status(last_seen: datetime, stopped_at: datetime | None, now: datetime | None = None) -> str:
    """alive / stale / gone for one heartbeat row (the definition; alive_q is its query)."""
    t = thresholds()
    age = ((now or timezone.now()) - last_seen).total_seconds()
    if stopped_at is not None or age >= t.gone:
        return Status.GONE
    if age <= t.alive:
        return Status.ALIVE
    return Status.STALE


def status_q(wanted: str, now: datetime | None = None) -> Q:
    """The rows `status()` calls `wanted`, as a filter."""
    t = thresholds()
    now = now or timezone.now()
    alive_since = now - timedelta(seconds=t.alive)
    gone_before = now - timedelta(seconds=t.gone)
    running = Q(stopped_at__isnull=True, last_seen__gt=gone_before)
    if wanted == Status.ALIVE:
        return running & Q(last_seen__gte=alive_since)
    if wanted == Status.STALE:
        return running & Q(last_seen__lt=alive_since)
    if wanted == Status.GONE:
        return ~running
    raise ValueError(f"unknown worker status {wanted!r}")


def alive_q(now: datetime | None = None) -> Q:
    return status_q(Status.ALIVE, now)


def task_worker_alive_q(now: datetime | None = None) -> Q:
    """Alive task workers (TASK_WORKER_KINDS) as a filter."""
    return alive_q(now) & Q(kind__in=TASK_WORKER_KINDS)


def processes() -> QuerySet[WorkerHeartbeat]:
    """The heartbeat rows of processes: every row but a provider job import's."""
    from recovery.models import WorkerHeartbeat

    return WorkerHeartbeat.objects.exclude(worker__startswith=REMOTE_JOB_PREFIX)


def alive_by_kind(now: datetime | None = None) -> dict[str, int]:
    """{kind: processes alive} for every kind, 0 included (one grouped read of the small
    heartbeat table through its last_seen index). Rows without a kind (created by a claim
    before the process's first beat) are not counted: every process beats before it works."""
    from django.db.models import Count

    alive = dict(
        processes().filter(alive_q(now)).values_list("kind").annotate(n=Count("pk")).order_by()
    )
    return {kind: alive.get(kind, 0) for kind in WorkerKind.values}


def counts(now: datetime | None = None) -> dict[str, int]:
    """Heartbeat rows by status (one aggregate over the small heartbeat table)."""
    from django.db.models import Count

    now = now or timezone.now()
    return processes().aggregate(**{s: Count("pk", filter=status_q(s, now)) for s in Status.values})


# --- writing ---------------------------------------------------------------------------------


def beat(worker_id: str, kind: str) -> None:
    """Record that this process is alive now (database clock); creates its row if needed."""
    from recovery.models import WorkerHeartbeat

    rows = WorkerHeartbeat.objects.filter(worker=worker_id)
    if rows.update(last_seen=Now(), pid=os.getpid(), kind=kind, stopped_at=None):
        return
    try:
        WorkerHeartbeat.objects.create(
            worker=worker_id,
            hostname=socket.gethostname()[:200],
            pid=os.getpid(),
            kind=kind,
            started_at=Now(),
            last_seen=Now(),
        )
    except IntegrityError:  # a claim created the row meanwhile (recovery.leases)
        rows.update(last_seen=Now(), pid=os.getpid(), kind=kind, stopped_at=None)


def goodbye(worker_id: str) -> None:
    """A clean exit: the row shows `gone` at once instead of turning stale first."""
    from recovery.models import WorkerHeartbeat

    WorkerHeartbeat.objects.filter(worker=worker_id).update(last_seen=Now(), stopped_at=Now())


class Heartbeat:
    """A daemon thread that beats every SALVAGE_HEARTBEAT_SECONDS until stopped.

    `keep_going()` is asked before each beat: a django-q2 worker whose cluster was killed is
    orphaned (it would wait on its queue for ever), so it stops beating and turns stale.
    """

    def __init__(
        self, worker_id: str, kind: str, *, keep_going: Callable[[], bool] | None = None
    ) -> None:
        self.worker_id = worker_id
        self.kind = kind
        self.keep_going = keep_going or (lambda: True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> Heartbeat:
        try:
            beat(self.worker_id, self.kind)  # the row exists before the process does any work
        except DATABASE_ERRORS as exc:
            # Started during a database outage: the process rides it out (recovery.ops.outage)
            # and the thread's next successful beat creates the row.
            self._report(exc)
            close_connections()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{self.kind}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = thresholds().heartbeat
        try:
            while not self._stop.wait(interval):
                if not self.keep_going():
                    return
                try:
                    beat(self.worker_id, self.kind)
                except Exception as exc:  # a database blip costs one beat, never the thread
                    self._report(exc)
                    with contextlib.suppress(Exception):
                        connection.close()
                else:
                    if self._failing:
                        log.warning("heartbeat of %s: beating again", self.worker_id)
                        self._failing = False
        finally:
            with contextlib.suppress(Exception):
                connection.close()  # this thread's own connection

    def _report(self, exc: BaseException) -> None:
        # One line when beats start failing (an outage lasts many beats), one when they resume.
        if not self._failing:
            self._failing = True
            text = " ".join(str(exc).split())[:160]
            log.warning(
                "heartbeat of %s failed (%s: %s); retrying every beat",
                self.worker_id,
                type(exc).__name__,
                text,
            )

    def stop(self) -> None:
        """Stop beating and say goodbye (a clean exit)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            goodbye(self.worker_id)
        except DATABASE_ERRORS as exc:
            # Exiting because the database is gone: its row turns stale, then gone, by itself.
            log.warning("goodbye of %s failed: %s", self.worker_id, type(exc).__name__)
        except Exception:
            log.warning("goodbye of %s failed", self.worker_id, exc_info=True)


def new_worker_id(prefix: str = "w") -> str:
    """Unique per process start: a restarted process never inherits an old lease's owner."""
    host = socket.gethostname()[:40]
    return f"{prefix}-{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


_worker_ids: dict[str, str] = {}


def process_worker_id(prefix: str = "q") -> str:
    """The lease owner of this django-q2 worker process (a respawned process gets a new one)."""
    current = _worker_ids.get(prefix)
    if current is None or f"-{os.getpid()}-" not in current:
        current = _worker_ids[prefix] = new_worker_id(prefix)
    return current


def start(kind: str, worker_id: str | None = None) -> Heartbeat:
    """Start this process's heartbeat (the `work`, `dispatch`, `deliver`, `qcluster` commands)."""
    return Heartbeat(worker_id or new_worker_id(kind), kind).start()


def on_qcluster_worker_spawn(sender=None, proc_name: str = "", **kwargs) -> None:
    """django-q2's post_spawn, in each worker process of a cluster: beat under the same id the
    process claims with (recovery.tasks), until its cluster process goes away."""
    import multiprocessing.util

    parent = os.getppid()
    beat_ = Heartbeat(
        process_worker_id(), WorkerKind.QCLUSTER, keep_going=lambda: os.getppid() == parent
    ).start()
    # A recycled or stopped worker exits through multiprocessing's finalizers, not atexit.
    multiprocessing.util.Finalize(None, beat_.stop, exitpriority=10)
