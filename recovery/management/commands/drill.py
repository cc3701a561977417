"""manage.py drill [--tasks N] [--kills K] [--seed S] [--json]: seed 002's recovery drill.

Runs on a scratch database with its own sandbox and real worker processes (recovery.showroom.drill).
Exit code 0 only if every property holds; 1 if any fails; 2 on bad input.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from recovery.showroom import drill


class Command(BaseCommand):
    help = "Play seed 002's recovery drill on real worker processes and verify its properties."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tasks", type=int, default=2000, help="pages in the drill's run")
        parser.add_argument("--kills", type=int, default=10, help="random worker SIGKILLs")
        parser.add_argument("--seed", type=int, default=0, help="replays the same drill")
        parser.add_argument("--workers", type=int, default=3, help="worker processes")
        parser.add_argument(
            "--timeout", type=float, default=900.0, help="seconds allowed for each phase"
        )
        parser.add_argument(
            "--db-outage-every",
            type=float,
            default=0.0,
            help="PostgreSQL: a database outage every this many seconds of collection (0: none)",
        )
        parser.add_argument(
            "--db-outage-seconds", type=float, default=5.0, help="how long each outage lasts"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--keep", action="store_true", help="keep the scratch directory and its logs"
        )
        # Internal: the child process that plays the drill on the scratch database.
        parser.add_argument("--inner", metavar="WORKDIR", help="(internal)")

    def handle(self, *args, **options) -> None:
        if options["tasks"] < 100:
            raise CommandError("--tasks: at least 100", returncode=2)
        if options["kills"] < 0:
            raise CommandError("--kills: must not be negative", returncode=2)
        if options["workers"] < 2:
            raise CommandError("--workers: at least 2 (one is paused by the drill)", returncode=2)
        if options["db_outage_every"] < 0 or options["db_outage_seconds"] <= 0:
            raise CommandError("--db-outage-every/--db-outage-seconds: positive", returncode=2)
        if options["db_outage_every"] and not os.environ.get("DATABASE_URL", "").startswith(
            "postgres"
        ):
            raise CommandError("--db-outage-every needs PostgreSQL (DATABASE_URL)", returncode=2)
        opts = drill.options_from(options)

        def echo(message: str) -> None:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()

        if options["inner"]:
            drill.main_inner(opts, Path(options["inner"]), echo=echo)
            return
        try:
            report = drill.run(opts, echo=echo)
        except RuntimeError as exc:
            raise CommandError(f"the drill could not run: {exc}", returncode=1) from None
        if options["json"]:
            self.stdout.write(json.dumps(report))
        else:
            self.stdout.write(drill.format_report(report))
        if not drill.report_ok(report):
            raise CommandError("the drill found a broken property", returncode=1)
