"""manage.py createrun DATASET --window W --manifest FILE: freeze a manifest into a run.

A dataset whose spec has a `sitemap` also gets its sitemap file as a task (and may omit
--manifest): its URLs become tasks as workers read it (recovery.fetch.sitemaps).

The last line printed is the run id alone, so scripts can take it with `tail -n 1`.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery.intake import manifests
from recovery.management.commands._accept_cli import actor
from recovery.ops.progress import Progress


class Command(BaseCommand):
    help = "Freeze a manifest (CSV, JSONL or one URL a line) into a run and its tasks."

    def add_arguments(self, parser) -> None:
        parser.add_argument("dataset", help="dataset name (see loaddataset)")
        parser.add_argument("--window", required=True, help="collection window, e.g. 2026-11-29")
        parser.add_argument(
            "--manifest",
            default=None,
            help=".csv, .jsonl or .txt file (optional when the dataset's spec has a sitemap)",
        )
        parser.add_argument(
            "--add",
            action="store_true",
            help="add the manifest's new URLs to the existing run of this window",
        )
        parser.add_argument(
            "--scraper-version", default=None, help="override the spec's scraper_version"
        )
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        # A bar on a terminal, a log line every few seconds otherwise, on stderr (stdout's last
        # line stays the run id alone). Made on the first call: parsing has finished by then.
        bars: list[Progress] = []

        def on_progress(done: int, total: int) -> None:
            if not bars:
                bars.append(Progress("createrun: writing tasks", total, unit="tasks"))
            bars[0].update(done)

        try:
            result = manifests.create_run(
                options["dataset"],
                options["window"],
                options["manifest"],
                add=options["add"],
                scraper_version=options["scraper_version"],
                actor=actor(options["actor"]),
                on_progress=on_progress,
            )
        except manifests.ManifestError as exc:
            raise CommandError(str(exc), returncode=2) from None
        finally:
            for bar in bars:
                bar.close()
        for line in result.summary():
            self.stdout.write(line)
        self.stdout.write(str(result.run.pk))
