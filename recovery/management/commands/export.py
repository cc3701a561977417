"""manage.py export RUN --format csv|jsonl [--output FILE]: stream accepted observations.

RUN is a run id, dataset@window, or a dataset name (its current accepted/published run).
With --output the file appears whole or not at all (temporary file, then rename).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from recovery import exports, progress, status
from recovery.management.commands._accept_cli import refuse


class Command(BaseCommand):
    help = "Export a run's accepted observations as CSV or JSONL."
    # No system checks: they import every URLconf and view (about half the start-up), and an
    # export of a few rows should not wait for them. `manage.py check` runs them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", help="run id, dataset@window, or dataset name (current run)")
        parser.add_argument("--format", choices=exports.FORMATS, default="csv")
        parser.add_argument("--output", help="file to write (default: standard output)")

    def handle(self, *args, **options) -> None:
        ref = options["run"]
        try:
            run = status.find_run(ref)
        except status.RunNotFound:
            run = exports.current_run(ref) if "@" not in ref and not ref.isdigit() else None
            if run is None:
                raise CommandError(
                    f"RUN {ref!r}: no such run, and no dataset of that name has an accepted run",
                    returncode=2,
                ) from None
        output = options["output"]
        # Bytes go to a file or to the binary layer of standard output (a real stdout): no
        # decoding and re-encoding of every chunk. A text-only stdout (call_command's StringIO)
        # gets the text stream.
        binary = getattr(self.stdout._out, "buffer", None)
        make = exports.stream if not output and binary is None else exports.stream_bytes
        try:
            chunks = make(run.pk, options["format"])
        except exports.ExportError as exc:
            raise refuse(exc) from None
        chunks = progress.counted(chunks, f"export run {run.pk}", unit="rows", count=_lines)
        if not output:
            if binary is None:
                for chunk in chunks:
                    self.stdout.write(chunk, ending="")
                self.stdout.flush()
                return
            self.stdout.flush()
            for chunk in chunks:
                binary.write(chunk)
            binary.flush()
            return
        target = Path(output).resolve()
        if target.exists() and not target.is_file():
            # /dev/null, a FIFO, a terminal: write straight through (never rename onto it).
            with open(target, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
            self.stdout.write(f"run {run.pk}: wrote {target}")
            return
        if not target.parent.is_dir():
            raise CommandError(f"--output: directory {target.parent} does not exist", returncode=2)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        size = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    size += len(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.stdout.write(f"run {run.pk}: wrote {target} ({size} bytes)")


def _lines(chunk: str | bytes) -> int:
    return chunk.count("\n" if isinstance(chunk, str) else b"\n")
