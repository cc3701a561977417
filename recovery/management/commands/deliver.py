"""manage.py deliver [--until-idle]: deliver due outbox events in the foreground."""

from __future__ import annotations

import logging
import threading

from django.core.management.base import BaseCommand, CommandError

from recovery.delivery import outbox
from recovery.ops import liveness, logs, outage, stopping

log = logging.getLogger("recovery.delivery")


class Command(BaseCommand):
    help = "Deliver due outbox events to SALVAGE_DESTINATION (foreground loop)."
    # No system checks at start: they import every URLconf and view (~0.08 s of a worker's
    # ~0.6 s start-up CPU, measured), which a loop that serves no page does not use.
    # `manage.py check`, `migrate` and CI run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--until-idle", action="store_true", help="exit when nothing is due")
        parser.add_argument("--limit", type=int, default=50, help="events per step")
        parser.add_argument(
            "--interval", type=float, default=1.0, help="seconds between idle polls"
        )

    def handle(self, *args, **options) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1", returncode=2)
        if options["interval"] <= 0:
            raise CommandError("--interval must be positive", returncode=2)
        logs.set_process("deliver")
        stop = threading.Event()

        # SIGTERM/SIGINT: the current delivery finishes, then the loop exits 0
        stopping.stop_on_signals(stop)
        total = 0
        heartbeat = liveness.start(liveness.WorkerKind.DELIVER)
        worker = heartbeat.worker_id
        logs.event(log, "worker_started", "deliver %s started", worker, worker=worker)
        # A database restart is waited out (one log line each way); past the limit, one line.
        guard = outage.OutageGuard("deliver", stop=stop)
        try:
            while not stop.is_set():
                done = guard.step(lambda: outbox.deliver_due(options["limit"]))
                if done is None:
                    continue  # the database was unreachable; the guard has waited
                total += done
                if done:
                    continue
                if options["until_idle"]:
                    break
                stop.wait(options["interval"])
        except outage.DatabaseOutage as exc:
            raise logs.gave_up(str(exc), log, worker=worker) from None
        finally:
            heartbeat.stop()
        logs.stopped(
            self.stdout, f"deliver: {total} delivery attempts", log, worker=worker, attempts=total
        )
