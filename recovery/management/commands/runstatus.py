"""manage.py runstatus RUN [--json]: counts by task state, coverage, acceptance state."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from recovery.quality import status


class Command(BaseCommand):
    help = "Show a run's task counts by state, coverage and acceptance state."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", help="run id or dataset@window")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **options) -> None:
        try:
            run = status.find_run(options["run"])
        except status.RunNotFound as exc:
            raise CommandError(str(exc), returncode=2) from None
        result = status.run_status(run)
        if options["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True))
        else:
            self.stdout.write(status.format_text(result))
