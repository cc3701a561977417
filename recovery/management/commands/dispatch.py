"""manage.py dispatch: wake django-q2 workers when tasks are due (run beside qcluster)."""

from __future__ import annotations

import logging
import threading

from django.core.management.base import BaseCommand, CommandError

from recovery import dispatch
from recovery.ops import liveness, logs, outage, stopping

log = logging.getLogger("recovery.dispatch")


class Command(BaseCommand):
    help = "Tick every --tick seconds: wake django-q2 workers when tasks are due."
    # No system checks at start: they import every URLconf and view (~0.08 s of a worker's
    # ~0.6 s start-up CPU, measured), which a loop that serves no page does not use.
    # `manage.py check`, `migrate` and CI run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--tick", type=float, default=None, help="seconds between ticks")
        parser.add_argument("--batch", type=int, default=None, help="tasks per wake-up")
        parser.add_argument("--once", action="store_true", help="one tick, then exit")
        parser.add_argument(
            "--no-wakeups",
            dest="wakeups",
            action="store_false",
            help="send django-q2 no wake-ups: for `manage.py work` processes without qcluster "
            "(schedules and counter compaction only)",
        )

    def handle(self, *args, **options):
        if options["tick"] is not None and options["tick"] <= 0:
            raise CommandError("--tick must be positive", returncode=2)
        if options["batch"] is not None and options["batch"] < 1:
            raise CommandError("--batch must be at least 1", returncode=2)
        logs.set_process("dispatch")
        if options["once"]:
            result = dispatch.tick(batch_size=options["batch"], wakeups=options["wakeups"])
            self.stdout.write(f"due {result.due}, waiting {result.waiting}, sent {result.sent}")
            return
        stop = threading.Event()

        # SIGTERM/SIGINT: the current tick finishes, then the loop exits 0
        stopping.stop_on_signals(stop)
        heartbeat = liveness.start(liveness.WorkerKind.DISPATCH)
        worker = heartbeat.worker_id
        logs.event(log, "worker_started", "dispatch %s started", worker, worker=worker)
        try:
            sent = dispatch.run_dispatcher(
                stop,
                tick_seconds=options["tick"],
                batch_size=options["batch"],
                wakeups=options["wakeups"],
            )
        except outage.DatabaseOutage as exc:
            raise logs.gave_up(str(exc), log, worker=worker) from None
        finally:
            heartbeat.stop()
        logs.stopped(
            self.stdout, f"dispatcher stopped: {sent} wake-ups sent", log, worker=worker, sent=sent
        )
