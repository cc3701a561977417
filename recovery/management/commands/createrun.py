"""manage.py createrun DATASET --window W --manifest FILE: freeze a manifest into a run.

The last line printed is the run id alone, so scripts can take it with `tail -n 1`.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery import manifests
from recovery.progress import Progress

FORMAT_NAMES = {"csv": "CSV", "jsonl": "JSON", "lines": "text"}


class Command(BaseCommand):
    help = "Freeze a manifest (CSV, JSONL or one URL a line) into a run and its tasks."

    def add_arguments(self, parser) -> None:
        parser.add_argument("dataset", help="dataset name (see loaddataset)")
        parser.add_argument("--window", required=True, help="collection window, e.g. 2026-11-29")
        parser.add_argument("--manifest", required=True, help=".csv, .jsonl or .txt file")
        parser.add_argument(
            "--add",
            action="store_true",
            help="add the manifest's new URLs to the existing run of this window",
        )
        parser.add_argument(
            "--scraper-version", default=None, help="override the spec's scraper_version"
        )

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
                on_progress=on_progress,
            )
        except manifests.ManifestError as exc:
            raise CommandError(str(exc), returncode=2) from None
        finally:
            for bar in bars:
                bar.close()
        run, m = result.run, result.manifest
        verb = "created" if result.created else "extended"
        line = (
            f"run {run.pk} {run.dataset.name}@{run.window} {verb}: {result.tasks_added} task(s) "
            f"added from {m.lines_read} {FORMAT_NAMES[m.format]} line(s), "
            f"manifest sha256 {m.sha256[:12]}"
        )
        if result.already_present:
            line += f", {result.already_present} already in the run"
        self.stdout.write(line)
        if m.duplicates:
            examples = "; ".join(
                f"line {d.line} repeats line {d.first_line} ({d.url} [{d.page_type}])"
                for d in m.duplicate_examples
            )
            self.stdout.write(f"{m.duplicates} duplicate URL(s) collapsed: {examples}")
        self.stdout.write(str(run.pk))
