"""Shared bits of the acceptance/rerun/export/deliver commands (helper "accept")."""

from __future__ import annotations

import getpass

from django.core.management.base import CommandError

from recovery import status


def actor(explicit: str | None) -> str:
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
    return CommandError(str(exc), returncode=2)
