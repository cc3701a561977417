"""manage.py loaddataset SPEC: create or update a Dataset from a TOML or JSON spec.

The audit log names who loaded it as `cli:<operating-system user>` (as accept, publish and
rerun do), so a robots.txt opt-out loaded from a shell is traced to a person, not `system`.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery import remote
from recovery.intake import specs
from recovery.management.commands._accept_cli import actor


class Command(BaseCommand):
    help = "Create or update a dataset from a TOML or JSON spec (docs/spec-format.md)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("spec", help="path to a .toml or .json dataset spec")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        path = options["spec"]
        try:
            spec = specs.check_file(path)  # the dashboard's upload runs the same checks
        except specs.SpecError as exc:
            raise CommandError(str(exc), returncode=2) from None
        dataset, outcome = specs.save_dataset(spec, actor=actor(options["actor"]))
        remote.forget_presence()  # a worker loop in this process must see a remote dataset now
        self.stdout.write(f"dataset {dataset.name} {outcome} (spec {dataset.spec_sha256[:12]})")
