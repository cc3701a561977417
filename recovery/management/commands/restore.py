"""manage.py restore DIR --database-url URL --data-dir PATH: a backup into a new database and
a new data directory (recovery.ops.backup; docs/production.md, "Restore").

It writes only to what its flags name, never to the database or data directory of the
settings it runs under, and refuses targets that are not empty.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from recovery.ops import backup


class Command(BaseCommand):
    help = (
        "Restore a `manage.py backup` directory into a new, empty database (--database-url; "
        "PostgreSQL: createdb it first) and a new data directory (--data-dir). Then start the "
        "processes with DATABASE_URL and SALVAGE_DATA_DIR set to them (migrate first when "
        "this release is newer than the backup's)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("dir", type=Path, help="a directory written by manage.py backup")
        parser.add_argument("--database-url", required=True, help="the new, empty database")
        parser.add_argument("--data-dir", type=Path, required=True, help="a new or empty directory")

    def handle(self, *args, **options) -> None:
        try:
            done = backup.restore(options["dir"], options["database_url"], options["data_dir"])
        except backup.BackupRefused as exc:
            raise CommandError(str(exc), returncode=2) from None
        except backup.BackupFailed as exc:
            raise CommandError(str(exc), returncode=1) from None
        moved = "".join(
            f"; {role} were at {where}: set {backup.FILE_ROLES[role]}={done.data_dir / role}"
            for role, where in done.moved_roles.items()
        )
        self.stdout.write(
            f"restored the backup of {done.manifest['created_at']} into {done.target.label()} "
            f"and {done.data_dir}{moved}; start with DATABASE_URL and SALVAGE_DATA_DIR set to them"
        )
