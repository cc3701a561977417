"""manage.py rerun RUN (--partition P | --page-type T | --error-class C | --rule R)...
--reason TEXT [--scraper-version V] [--from-archive]: a recovery batch under the original run.

--from-archive re-extracts each page from the page archive (recovery.archive) instead of
fetching it; a page the archive no longer holds is fetched."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from recovery.management.commands._accept_cli import actor, find_run, refuse
from recovery.quality import reruns


class Command(BaseCommand):
    help = "Create a recovery batch: rerun the selected terminal tasks of a run."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", help="run id or dataset@window")
        parser.add_argument("--partition", action="append", default=[], help="repeatable")
        parser.add_argument("--page-type", action="append", default=[], help="repeatable")
        parser.add_argument("--error-class", action="append", default=[], help="repeatable")
        parser.add_argument(
            "--rule", action="append", default=[], help="a failed rule (repeatable)"
        )
        parser.add_argument("--reason", required=True, help="why the tasks are rerun")
        parser.add_argument(
            "--scraper-version",
            help="the repaired scraper version (default: the dataset spec's current one)",
        )
        parser.add_argument(
            "--from-archive",
            action="store_true",
            help="re-extract the stored pages instead of fetching them (missing ones are fetched)",
        )
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        run = find_run(options["run"])
        version = options["scraper_version"] or reruns.default_scraper_version(run)
        try:
            batch = reruns.create_recovery_batch(
                run.pk,
                partitions=options["partition"],
                page_types=options["page_type"],
                error_classes=options["error_class"],
                rules=options["rule"],
                reason=options["reason"],
                scraper_version=version,
                actor=actor(options["actor"]),
                from_archive=options["from_archive"],
            )
        except reruns.RerunError as exc:
            raise refuse(exc) from None
        self.stdout.write(
            f"recovery batch {batch.pk} of run {run.pk}: {batch.task_count} tasks reset "
            f"(scraper version {batch.scraper_version})"
            + (", re-extracted from the page archive where kept" if batch.from_archive else "")
        )
