"""Shared bits of the commands that change things: who acts (`actor`), which run (`find_run`),
and how a refusal reads and exits (`refuse`)."""

from __future__ import annotations

import getpass

from django.core.management.base import BaseCommand, CommandError

from recovery.models import Run
from recovery.quality import acceptance, holdups, status


def actor(explicit: str | None) -> str:
    """Who the audit log names for a command: `--actor` when given, else `cli:<operating-system
    user>` (issue 29: a command's action is a person's, never `system`). Every command that
    audits asks here, so the spelling is one."""
    if explicit:
        return explicit
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def find_run(ref: str):
    """RUN as a run id or dataset@window; bad input exits with code 2."""
    try:
        return status.find_run(ref)
    except status.RunNotFound as exc:
        raise CommandError(str(exc), returncode=2) from None


def refuse(exc: Exception) -> CommandError:
    """A refusal exits with code 2 and the engine's message; a run refused for failing rules
    also names each failing rule and quarantined partition, with the command that reruns it."""
    text = str(exc)
    if isinstance(exc, acceptance.RulesFail):
        run = status.find_run(exc.run_id)
        text = "\n".join([text, *holdups.lines(holdups.report(run))])
    return CommandError(text, returncode=2)


class RunMoveCommand(BaseCommand):
    """`manage.py <verb> RUN [--actor NAME]`: one acceptance move of one run. A subclass
    names the move (`move`, one engine call) and the word printed after it (`done`); a refusal
    exits with code 2 and the engine's message."""

    done = ""  # "run 7 accepted"

    def move(self, run_id: int, actor: str) -> Run:
        raise NotImplementedError

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", help="run id or dataset@window")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")

    def handle(self, *args, **options) -> None:
        run = find_run(options["run"])
        try:
            run = self.move(run.pk, actor(options["actor"]))
        except acceptance.AcceptanceError as exc:
            raise refuse(exc) from None
        self.stdout.write(f"run {run.pk} {self.done}")
