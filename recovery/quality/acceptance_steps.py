"""Hooks that drive acceptance and outbox delivery from the engine's loops.

recovery/worker.py and recovery/dispatch.py name these in their STEPS, IDLE_CHECKS and
TICK_HOOKS:
- a worker step that runs `acceptance.advance_runs()` (complete recovery batches, make
  candidates, auto-accept) at most once per SALVAGE_ADVANCE_SECONDS while tasks are flowing;
- a worker idle check that runs it once more before `work --until-idle` stops, so the run is a
  candidate (or accepted) when the command returns;
- a dispatcher tick hook that, when a run or batch is ready to move, enqueues
  `recovery.tasks.advance_runs`, and when outbox events are due enqueues
  `recovery.tasks.deliver_due` (each at most once per SALVAGE_OUTBOX_SWEEP_SECONDS).
  The tick only looks (cheap counter reads) and enqueues: the evaluation itself never runs
  inside the tick's transaction. A crash between an acceptance's COMMIT and its wake-up is
  healed here: the event waits in the table, never lost.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from recovery.delivery import outbox
from recovery.quality import acceptance

log = logging.getLogger(__name__)

_last = {"advance": 0.0, "advance_wake": 0.0, "sweep": 0.0}


def _interval(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def advance_step(worker_id: str = "") -> bool:
    """Worker step: advance runs, throttled. True when a run or batch moved."""
    now = time.monotonic()
    if now - _last["advance"] < _interval("SALVAGE_ADVANCE_SECONDS", 1.0):
        return False
    _last["advance"] = now
    return acceptance.advance_runs() > 0


def advance_before_idle() -> bool:
    """Idle check: one unthrottled advance; True (keep looping) if something moved."""
    _last["advance"] = time.monotonic()
    return acceptance.advance_runs() > 0


def _enqueue(func: str) -> None:
    from django_q.tasks import async_task

    async_task(func, q_options={"group": "acceptance"})


def dispatch_hook() -> int:
    """Dispatcher tick hook: wake `advance_runs` and `deliver_due` when there is work."""
    sent = 0
    now = time.monotonic()
    every = _interval("SALVAGE_OUTBOX_SWEEP_SECONDS", 5.0)
    if now - _last["advance_wake"] >= every and acceptance.ready_to_advance():
        _last["advance_wake"] = now
        _enqueue("recovery.tasks.advance_runs")
        sent += 1
    if now - _last["sweep"] >= every and outbox.has_due():
        _last["sweep"] = now
        _enqueue("recovery.tasks.deliver_due")
        sent += 1
    return sent
