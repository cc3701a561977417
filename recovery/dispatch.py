"""The dispatcher: turns due work in our tables into django-q2 wake-ups.

django-q2 cannot do this itself: its scheduler wakes only every ~30 s and has no ETA, its ORM
broker re-delivers whatever is not acknowledged within `retry`, and its Redis broker loses
what a killed worker had taken (research/django-q2.md). So a small `manage.py dispatch`
process ticks every ~0.5 s and, when tasks are due (pending, retry_wait whose time has come,
or leased with an expired lease), enqueues `recovery.tasks.run_batch_task` wake-ups, one per
claim batch, bounded by how many wake-ups are already waiting. A wake-up carries no task id:
the worker claims whatever is due with the fenced lease, so a duplicate or late wake-up is a
cheap no-op and a lost one is simply re-sent on a later tick.

With the ORM broker on our database the wake-up rows commit in the same transaction as the
count that justified them; several dispatchers are safe (PostgreSQL: an advisory lock
serialises ticks; SQLite: the IMMEDIATE transaction does). With Redis the push happens after
COMMIT (on_commit), and anything lost is re-sent because due work stays unclaimed.

Every few seconds the dispatcher also folds the counter delta rows of busy runs
(counters.compact) so dashboards keep summing a handful of rows, not millions.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django import db
from django.conf import settings
from django.db import connection, transaction

from recovery import counters, remote
from recovery.intake import schedule_runs
from recovery.leases import due_sql
from recovery.ops import outage
from recovery.quality import acceptance_steps

log = logging.getLogger(__name__)

TASK_FUNC = "recovery.tasks.run_batch_task"
# Any constant shared by every dispatcher: pg_advisory_xact_lock key ("salvage dispatch").
_ADVISORY_KEY = 0x5A17D15
COMPACT_MIN_ROWS = 200

# The tick's other work, written out: fn() -> number of wake-ups it sent, called inside the
# tick's transaction. Acceptance and outbox: wake advance_runs / deliver_due when runs are
# ready or events are due. Remote jobs: wake poll_remote_jobs to send, reap and poll.
WAKE_HOOKS: tuple[Callable[[], int], ...] = (
    acceptance_steps.dispatch_hook,
    remote.dispatch_hook,
)
# Work the dispatcher does itself, whoever executes the tasks. Schedules: after the tick
# commits, create the runs whose windows are due.
OWN_HOOKS: tuple[Callable[[], int], ...] = (schedule_runs.dispatch_hook,)
TICK_HOOKS = WAKE_HOOKS + OWN_HOOKS


def _uses_orm_broker() -> bool:
    return "orm" in settings.Q_CLUSTER


def due_count(cap: int) -> int:
    """How many tasks are claimable now (database clock), counting at most `cap`."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM recovery_task WHERE {due_sql()} LIMIT %s) AS due",
            [cap],
        )
        return cursor.fetchone()[0]


def waiting_wakeups() -> int:
    """Wake-ups sent but not yet taken by a cluster (ORM: unlocked rows; Redis: list length)."""
    from django_q.brokers import get_broker

    return get_broker().queue_size()


def _enqueue(n: int, batch_size: int) -> None:
    from django_q.tasks import async_task

    def send() -> None:
        for _ in range(n):
            # save=False: a wake-up's result is worth nothing; our tables hold the outcome.
            async_task(TASK_FUNC, batch_size=batch_size, q_options={"save": False})

    if _uses_orm_broker():
        send()  # the OrmQ rows commit with this transaction
    else:
        transaction.on_commit(send)  # Redis is not transactional: push only after COMMIT


@dataclass(slots=True)
class TickResult:
    due: int = 0
    waiting: int = 0
    sent: int = 0

    def __bool__(self) -> bool:
        return self.sent > 0


def tick(
    *, batch_size: int | None = None, max_waiting: int | None = None, wakeups: bool = True
) -> TickResult:
    """One dispatcher step: enqueue wake-ups for due work; truthy when it sent any.

    `wakeups=False` (`dispatch --no-wakeups`) is for a deployment of `manage.py work`
    processes and no qcluster: they claim, advance runs and poll remote jobs by themselves,
    and a wake-up no cluster reads would stay in the ORM broker's table for ever. The tick
    then only runs OWN_HOOKS (schedules)."""
    batch_size = batch_size or settings.SALVAGE_CLAIM_BATCH
    max_waiting = max_waiting or settings.SALVAGE_DISPATCH_MAX_WAITING
    result = TickResult()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_KEY])
        if wakeups:
            result.due = due_count(max_waiting * batch_size)
        if result.due:
            result.waiting = waiting_wakeups()
            wanted = min(math.ceil(result.due / batch_size), max_waiting)
            result.sent = max(0, wanted - result.waiting)
            if result.sent:
                _enqueue(result.sent, batch_size)
        for hook in TICK_HOOKS if wakeups else OWN_HOOKS:
            result.sent += hook() or 0
    return result


def compact_busy_runs(min_rows: int = COMPACT_MIN_ROWS) -> int:
    """Fold the counter deltas of runs with many rows; returns how many runs were compacted."""
    from django.db.models import Count

    from recovery.models import TaskCountDelta

    busy = (
        TaskCountDelta.objects.values("run_id")
        .annotate(n=Count("id"))
        .filter(n__gt=min_rows)
        .values_list("run_id", flat=True)
    )
    done = 0
    for run_id in list(busy):
        counters.compact(run_id)
        done += 1
    return done


def run_dispatcher(
    stop: threading.Event | None = None,
    *,
    tick_seconds: float | None = None,
    compact_seconds: float | None = None,
    batch_size: int | None = None,
    wakeups: bool = True,
) -> int:
    """The `manage.py dispatch` loop; returns the number of wake-ups sent."""
    stop = stop or threading.Event()
    tick_seconds = tick_seconds or settings.SALVAGE_DISPATCH_TICK
    compact_seconds = compact_seconds or settings.SALVAGE_COMPACT_SECONDS
    sent = 0
    last_compact = time.monotonic()
    # A database restart or outage: one log line each way, capped backoff, and DatabaseOutage
    # past SALVAGE_DB_OUTAGE_LIMIT (the command exits 1). The truth is in the tables, so the
    # missed ticks only delay work.
    guard = outage.OutageGuard("dispatch", stop=stop)

    def one_tick() -> int:
        nonlocal last_compact
        done = tick(batch_size=batch_size, wakeups=wakeups).sent
        if time.monotonic() - last_compact >= compact_seconds:
            compact_busy_runs()
            last_compact = time.monotonic()
        return done

    while not stop.is_set():
        db.close_old_connections()
        sent += guard.step(one_tick) or 0
        stop.wait(tick_seconds)
    return sent
