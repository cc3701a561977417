"""manage.py publish RUN: accepted -> published (writes the outbox event)."""

from __future__ import annotations

from recovery.management.commands._accept_cli import RunMoveCommand
from recovery.models import Run
from recovery.quality import acceptance


class Command(RunMoveCommand):
    help = "Publish an accepted run."
    done = "published"

    def move(self, run_id: int, actor: str) -> Run:
        return acceptance.publish_run(run_id, actor)
