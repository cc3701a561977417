"""Hooks that drive acceptance and outbox delivery from the engine's loops.

Imported at the bottom of recovery/worker.py and recovery/dispatch.py (as recovery.remote is),
it registers:
- a worker step that runs `acceptance.advance_runs()` (complete recovery batches, make
  candidates, auto-accept) at most once per SALVAGE_ADVANCE_SECONDS while tasks are flowing;
- a worker idle check that runs it once more before `work --until-idle` stops, so the run is a
  candidate (or accepted) when the command returns;
- a dispatcher tick hook that advances runs and, when outbox events are due and no sweep was
  sent recently, enqueues `recovery.outbox_tasks.deliver_due` (a crash between an acceptance's
  COMMIT and its wake-up is healed here: the event waits in the table, never lost).
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from recovery import acceptance, outbox

log = logging.getLogger(__name__)

_last = {"advance": 0.0, "sweep": 0.0}


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


def dispatch_hook() -> int:
    """Dispatcher tick hook: advance runs; wake a delivery sweep when events are due."""
    acceptance.advance_runs()
    now = time.monotonic()
    if now - _last["sweep"] < _interval("SALVAGE_OUTBOX_SWEEP_SECONDS", 5.0):
        return 0
    if not outbox.has_due():
        return 0
    _last["sweep"] = now
    outbox.wake()
    return 1


def register() -> None:
    from recovery import dispatch, worker

    worker.register_step(advance_step)
    worker.register_idle_check(advance_before_idle)
    dispatch.register_tick_hook(dispatch_hook)


register()
