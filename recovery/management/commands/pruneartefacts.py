"""manage.py pruneartefacts: delete triage files (screenshots, rendered HTML) nobody needs, and
the incident records of the same runs, and apply the page archive's retention.

Run it from cron (or a schedule) wherever SALVAGE_ARTEFACT_DIR lives; recovery.fetch.artefacts.prune
says which files go and why; recovery.ops.incidents.prune applies the published-runs rule to the
incidents (provider error answers) kept in the database; recovery.archive.store.prune removes
archived pages older than SALVAGE_ARCHIVE_DAYS, then the oldest beyond SALVAGE_ARCHIVE_MAX_BYTES.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery.archive import store as archive
from recovery.fetch import artefacts
from recovery.ops import incidents


class Command(BaseCommand):
    help = (
        "Delete artefact files and incident records of runs published more than "
        "--published-days ago, and files no attempt names (older than --orphan-minutes); "
        "archived pages past SALVAGE_ARCHIVE_DAYS or beyond SALVAGE_ARCHIVE_MAX_BYTES."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--published-days", type=int, default=30)
        parser.add_argument("--orphan-minutes", type=int, default=60)
        parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")

    def handle(self, *args, **options) -> None:
        for flag in ("published_days", "orphan_minutes"):
            if options[flag] < 0:
                raise CommandError(f"--{flag.replace('_', '-')} must be 0 or more")
        report = artefacts.prune(
            published_days=options["published_days"],
            orphan_minutes=options["orphan_minutes"],
            dry_run=options["dry_run"],
        )
        gone = incidents.prune(published_days=options["published_days"], dry_run=options["dry_run"])
        pages = archive.prune(dry_run=options["dry_run"])
        verb = "would remove" if options["dry_run"] else "removed"
        self.stdout.write(
            f"{verb} {len(report.removed_published)} file(s) of published runs and "
            f"{len(report.removed_orphans)} orphan file(s); kept {report.kept}; "
            f"{verb} {gone} incident(s) of published runs; page archive: {verb} "
            f"{pages.expired} expired and {pages.over_cap} over its cap, kept {pages.kept} "
            f"({pages.kept_bytes} bytes)"
        )
