"""manage.py work: the claim -> execute -> commit loop in the foreground (no django-q2)."""

from __future__ import annotations

import gc
import logging
import threading

from django.core.management.base import BaseCommand, CommandError

from recovery import worker
from recovery.leases import crashes
from recovery.ops import liveness, logs, outage, progress, stopping
from recovery.providers import known

log = logging.getLogger("recovery.worker")


class Command(BaseCommand):
    help = "Run the worker loop in the foreground: claim due tasks, execute, commit."
    # No system checks at start: they import every URLconf and view (~0.08 s of a worker's
    # ~0.6 s start-up CPU, measured), which a loop that serves no page does not use.
    # `manage.py check`, `migrate` and CI run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None, help="tasks run at once")
        parser.add_argument("--batch", type=int, default=None, help="tasks claimed per step")
        parser.add_argument(
            "--until-idle", action="store_true", help="exit when no task is due any more"
        )
        parser.add_argument(
            "--idle-wait",
            type=float,
            default=None,
            help="with --until-idle: also wait for tasks due within this many seconds "
            "(default: the lease length, so a crashed worker's leases are finished)",
        )
        parser.add_argument("--worker-id", default=None, help="lease owner name (default: unique)")

    def handle(self, *args, **options):
        for name in ("concurrency", "batch"):
            if options[name] is not None and options[name] < 1:
                raise CommandError(f"--{name} must be at least 1", returncode=2)
        if options["idle_wait"] is not None and options["idle_wait"] < 0:
            raise CommandError("--idle-wait must not be negative", returncode=2)
        logs.set_process("work")
        # The providers imported, then frozen with the rest: what is loaded by now lives as long
        # as the process, and out of the collector's way its full collections stop re-walking
        # it (~5% of a worker's instructions by callgrind; CPU per page x0.93 in the scrape bench).
        known()
        gc.freeze()
        stop = threading.Event()

        # SIGTERM/SIGINT: the current step (claim, execute, commit) finishes, then the loop exits 0
        stopping.stop_on_signals(stop)
        worker_id = options["worker_id"] or liveness.new_worker_id()
        stats = worker.LoopStats()
        watch = progress.watch_worker(worker_id, stats)  # tasks committed: a bar on a terminal
        heartbeat = liveness.start(liveness.WorkerKind.WORK, worker_id)  # idle or busy
        logs.event(log, "worker_started", "work %s started", worker_id, worker=worker_id)
        # A database restart ends the loop with a connection error: wait it out (one log line
        # each way, capped backoff) and run the loop again; the step that failed was rolled
        # back. Past SALVAGE_DB_OUTAGE_LIMIT: exit 1, one line. Once the database answers,
        # the leases this worker still holds are given back, and takeovers of its leases
        # meanwhile pardoned: an outage is no crash (recovery.leases.crashes.pardon_outage).
        guard = outage.OutageGuard(
            "work",
            stop=stop,
            on_back=lambda noticed_at: crashes.pardon_outage(worker_id, noticed_at),
        )
        try:
            while not stop.is_set():
                part = guard.step(
                    lambda: worker.run_forever(
                        worker_id,
                        batch_size=options["batch"],
                        concurrency=options["concurrency"],
                        until_idle=options["until_idle"],
                        idle_wait=options["idle_wait"],
                        stop=stop,
                        extra_steps=(watch,),
                        stats=stats,
                    )
                )
                if part is not None:
                    break
        except outage.DatabaseOutage as exc:
            raise logs.gave_up(str(exc), log, worker=worker_id) from None
        finally:
            heartbeat.stop()
            watch.close()
        logs.stopped(self.stdout, f"worker {worker_id}: {stats.summary()}", log, worker=worker_id)
