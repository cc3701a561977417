"""manage.py reject RUN --reason TEXT: candidate -> rejected."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from recovery.management.commands._accept_cli import actor, find_run, refuse
from recovery.quality import acceptance


class Command(BaseCommand):
    help = "Reject a candidate run, with a reason."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", help="run id or dataset@window")
        parser.add_argument("--reason", required=True, help="why the run is rejected")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        run = find_run(options["run"])
        try:
            run = acceptance.reject_run(run.pk, actor(options["actor"]), options["reason"])
        except acceptance.AcceptanceError as exc:
            raise refuse(exc) from None
        self.stdout.write(f"run {run.pk} rejected")
