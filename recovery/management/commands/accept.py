"""manage.py accept RUN: candidate -> accepted when the rules pass (writes the outbox event)."""

from __future__ import annotations

from recovery.management.commands._accept_cli import RunMoveCommand
from recovery.models import Run
from recovery.quality import acceptance


class Command(RunMoveCommand):
    help = "Accept a candidate run whose validation rules pass."
    done = "accepted"

    def move(self, run_id: int, actor: str) -> Run:
        return acceptance.accept_run(run_id, actor)
