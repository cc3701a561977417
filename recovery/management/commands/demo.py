"""manage.py demo: the whole product on one machine, in one command (Ctrl-C stops it all).

Migrates the SQLite database under the data directory, creates the demo users, starts the
sandbox shop, loads a demo dataset and run (skipped when they exist: a second demo continues
where the first stopped), then starts the dispatcher, a django-q2 cluster and gunicorn (the
dashboard, static files by whitenoise) and prints the URL and the logins. The logic lives in
recovery.showroom.demo; this module only parses options.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from recovery.showroom import demo


class Command(BaseCommand):
    help = "Run the demo: sandbox, workers and dashboard on this machine; Ctrl-C stops it."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="dashboard port (0: free)")
        parser.add_argument("--pages", type=int, default=3000, help="pages in the demo run")
        parser.add_argument("--data-dir", default=None, help="where the demo keeps its data")
        parser.add_argument(
            "--no-browser-open", action="store_true", help="do not open a web browser"
        )
        parser.add_argument("--workers", type=int, default=2, help="django-q2 worker processes")

    def handle(self, *args, **options) -> None:
        if not 0 <= options["port"] <= 65535:
            raise CommandError("--port: must be between 0 and 65535", returncode=2)
        if not 10 <= options["pages"] <= 1_000_000:
            raise CommandError("--pages: between 10 and 1,000,000", returncode=2)
        if options["workers"] < 1:
            raise CommandError("--workers: at least 1", returncode=2)
        data_dir = Path(options["data_dir"]).resolve() if options["data_dir"] else None
        if data_dir is not None and data_dir != Path(settings.DATA_DIR):
            # Settings are read once at start-up: run again with the data directory in the
            # environment so this process and every child use the same database.
            if len(sys.argv) < 2 or sys.argv[1] != "demo":
                raise CommandError(
                    "--data-dir: set SALVAGE_DATA_DIR instead when calling demo from code",
                    returncode=2,
                )
            env = dict(os.environ, SALVAGE_DATA_DIR=str(data_dir))
            os.execve(sys.executable, [sys.executable, *sys.argv], env)
        try:
            code = demo.run_demo(
                port=options["port"],
                pages=options["pages"],
                workers=options["workers"],
                open_browser=not options["no_browser_open"],
                echo=lambda line: (self.stdout.write(line), self.stdout.flush()),
            )
        except demo.DemoError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if code:
            raise CommandError("the demo stopped because a process kept failing", returncode=1)
