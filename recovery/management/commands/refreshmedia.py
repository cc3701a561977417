"""manage.py refreshmedia JOB: a fresh link to a media job's result, or the news that it is gone.

Seed 003's "expired URL versus missing file": the job is looked up for a fresh link to the same
stored object (nothing is regenerated) and the link is checked. It works: the old link had
only expired; the fresh one is printed alone on the last line (it is never stored). The
provider answers 404/410 for the object: the file is missing, the handoff becomes `missing`
and the command exits 1; regenerating it (a new, paid, job) is an operator's decision on the
dashboard's job page. Bad input (no such job, nothing handed off) exits 2.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery import remote
from recovery.management.commands._accept_cli import actor


class Command(BaseCommand):
    help = "Refresh the link to a media job's result (expired link vs missing file)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("job", type=int, help="the remote job's number (RemoteJob id)")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        try:
            refreshed = remote.refresh_media(options["job"], actor(options["actor"]))
        except remote.HandoffError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if refreshed.outcome == "missing":
            raise CommandError(
                f"remote job {refreshed.job}: {refreshed.detail}; regenerating it creates a new "
                f"paid job (the dashboard's Reconcile page, ?job={refreshed.job})",
                returncode=1,
            )
        self.stdout.write(f"remote job {refreshed.job}: {refreshed.detail}")
        self.stdout.write(refreshed.url)
