"""manage.py backup DIR: the database and the data directory's files, with a manifest.

recovery.ops.backup says what goes in and why it is consistent while every process runs;
docs/production.md ("Back up") is the operator's page.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from recovery.ops import backup


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


class Command(BaseCommand):
    help = (
        "Back up the database (pg_dump -Fc, or SQLite's online backup) and the data directory's "
        "files (artefacts, kept exports, schedule manifests) into DIR, a new or empty "
        "directory, with manifest.json (sizes, SHA-256, applied migrations). Safe while every "
        "process runs."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("dir", type=Path, help="a new or empty directory")

    def handle(self, *args, **options) -> None:
        try:
            manifest = backup.backup(options["dir"])
        except backup.BackupRefused as exc:
            raise CommandError(str(exc), returncode=2) from None
        except backup.BackupFailed as exc:
            raise CommandError(str(exc), returncode=1) from None
        db, files = manifest["database"], manifest["files"]
        latest = ", ".join(f"{app} {names[-1]}" for app, names in manifest["migrations"].items())
        self.stdout.write(
            f"backup {Path(options['dir']).resolve()}: database {db['vendor']} {_mb(db['bytes'])}, "
            f"files {_mb(files['bytes'])} ({files['entries']} files); migrations: {latest}"
        )
