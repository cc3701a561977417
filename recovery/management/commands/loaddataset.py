"""manage.py loaddataset SPEC [--diff]: create or update a Dataset from a TOML or JSON spec.

--diff checks the spec and prints what it would change in the stored spec (the diff the
dashboard shows before a new version replaces the current one), storing nothing.

The audit log names who loaded it as `cli:<operating-system user>` (as accept, publish and
rerun do), so a robots.txt opt-out loaded from a shell is traced to a person, not `system`.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from recovery import remote
from recovery.intake import spec_diff, specs
from recovery.management.commands._accept_cli import actor


class Command(BaseCommand):
    help = "Create or update a dataset from a TOML or JSON spec (docs/spec-format.md)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("spec", help="path to a .toml or .json dataset spec")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")
        parser.add_argument(
            "--diff",
            action="store_true",
            help="check and print the change against the stored spec; store nothing",
        )

    def handle(self, *args, **options) -> None:
        path = options["spec"]
        try:
            spec = specs.check_file(path)  # the dashboard's upload runs the same checks
        except specs.SpecError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if options["diff"]:
            return self._diff(spec)
        dataset, outcome = specs.save_dataset(spec, actor=actor(options["actor"]))
        remote.forget_presence()  # a worker loop in this process must see a remote dataset now
        self.stdout.write(f"dataset {dataset.name} {outcome} (spec {dataset.spec_sha256[:12]})")

    def _diff(self, spec: dict) -> None:
        from recovery.models import Dataset

        new_sha = specs.spec_sha256(spec)
        current = Dataset.objects.filter(name=spec["name"]).first()
        if current is None:
            self.stdout.write(f"dataset {spec['name']} would be created (spec {new_sha[:12]})")
            return
        if current.spec_sha256 == new_sha:
            self.stdout.write(f"dataset {current.name} unchanged (spec {new_sha[:12]})")
            return
        for line in spec_diff.lines(current.spec, spec, current.spec_sha256, new_sha):
            self.stdout.write(line.text)
        self.stdout.write(
            f"dataset {current.name} would be updated (spec {current.spec_sha256[:12]} -> "
            f"{new_sha[:12]}); nothing stored"
        )
