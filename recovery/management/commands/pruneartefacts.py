"""manage.py pruneartefacts: delete triage files (screenshots, rendered HTML) nobody needs.

Run it from cron (or a schedule) wherever SALVAGE_ARTEFACT_DIR lives; recovery.artefacts.prune
says which files go and why.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery import artefacts


class Command(BaseCommand):
    help = (
        "Delete artefact files of runs published more than --published-days ago, and files no "
        "attempt names (older than --orphan-minutes)."
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
        verb = "would remove" if options["dry_run"] else "removed"
        self.stdout.write(
            f"{verb} {len(report.removed_published)} file(s) of published runs and "
            f"{len(report.removed_orphans)} orphan file(s); kept {report.kept}"
        )
