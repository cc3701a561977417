"""manage.py export RUN --format csv|jsonl|parquet [--output FILE]: stream accepted observations.

RUN is a run id, dataset@window, or a dataset name (its current accepted/published run).
Each export written whole is audited (`export_command`, under `cli:<operating-system user>` or
--actor), as a person's download from the dashboard or the API is: data leaving the system is
traced to who took it.
With --output the file appears whole or not at all (temporary file, then rename). Parquet is
binary: it goes to --output or to a binary standard output, never to a text stream.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from recovery import audit
from recovery.delivery import exports, latest
from recovery.management.commands._accept_cli import actor, refuse
from recovery.models import Dataset
from recovery.ops import progress
from recovery.quality import status


class Command(BaseCommand):
    help = "Export a run's accepted observations as CSV, JSONL or Parquet."
    # No system checks: they import every URLconf and view (about half the start-up), and an
    # export of a few rows should not wait for them. `manage.py check` runs them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", help="run id, dataset@window, or dataset name (current run)")
        parser.add_argument("--format", choices=exports.FORMATS, default="csv")
        parser.add_argument("--output", help="file to write (default: standard output)")
        parser.add_argument("--actor", help="name recorded in the audit log (default: cli:<user>)")
        parser.add_argument(
            "--latest",
            action="store_true",
            help="RUN names a dataset: each entity's latest published value, across windows",
        )

    def handle(self, *args, **options) -> None:
        if options["latest"]:
            self._latest(options["run"], options["format"], options["output"])
            dataset = Dataset.objects.get(name=options["run"])
            self._audit(options, dataset, latest=True)
            return
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
        fmt = options["format"]
        if fmt not in exports.TEXT_FORMATS and not output and binary is None:
            raise CommandError(
                f"--format {fmt} is binary: give --output FILE or redirect standard output",
                returncode=2,
            )
        make = exports.stream if not output and binary is None else exports.stream_bytes
        try:
            chunks = make(run.pk, fmt)
        except exports.ExportError as exc:
            raise refuse(exc) from None
        label = f"export run {run.pk}"
        if fmt in exports.TEXT_FORMATS:
            counted = progress.counted(chunks, label, unit="rows", count=_lines)
        else:
            counted = progress.counted(chunks, label, unit="bytes", count=len)
        try:
            self._write(f"run {run.pk}", counted, output, binary)
        except exports.ExportError as exc:
            # A value that does not fit its typed column, found mid-stream (Parquet).
            raise CommandError(f"run {run.pk}: {exc}", returncode=1) from None
        self._audit(options, run)

    def _audit(self, options, obj, latest: bool = False) -> None:
        output = str(Path(options["output"]).resolve()) if options["output"] else "stdout"
        detail = {
            "format": options["format"],
            "output": output,
            **({"latest": True} if latest else {}),
        }
        audit.record(actor(options["actor"]), "export_command", obj, "", **detail)

    def _write(self, label: str, chunks, output: str | None, binary) -> None:
        """To standard output, or whole to --output (a temporary file renamed), or straight
        through to a special file."""
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
            self.stdout.write(f"{label}: wrote {target}")
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
        self.stdout.write(f"{label}: wrote {target} ({size} bytes)")

    def _latest(self, dataset: str, fmt: str, output: str | None) -> None:
        """The current-state view (recovery.delivery.latest), to standard output or whole to
        --output (a temporary file renamed); Parquet as a run's export is."""
        binary = getattr(self.stdout._out, "buffer", None)
        if fmt not in latest.TEXT_FORMATS and not output and binary is None:
            raise CommandError(
                f"--format {fmt} is binary: give --output FILE or redirect standard output",
                returncode=2,
            )
        label = f"export {dataset} latest"
        counted: Iterator[str] | Iterator[bytes]
        try:
            if not output and binary is None:
                text = latest.stream(dataset, fmt)
                counted = progress.counted(text, label, unit="rows", count=_lines)
            elif fmt in latest.TEXT_FORMATS:
                encoded = latest.stream_bytes(dataset, fmt)
                counted = progress.counted(encoded, label, unit="rows", count=_lines)
            else:
                parquet = latest.stream_bytes(dataset, fmt)
                counted = progress.counted(parquet, label, unit="bytes", count=len)
        except latest.LatestError as exc:
            raise CommandError(f"--latest: {exc}", returncode=2) from None
        except exports.ExportError as exc:
            raise refuse(exc) from None
        try:
            self._write(f"dataset {dataset} latest", counted, output, binary)
        except exports.ExportError as exc:
            raise CommandError(f"dataset {dataset}: {exc}", returncode=1) from None


def _lines(chunk: str | bytes) -> int:
    return chunk.count("\n" if isinstance(chunk, str) else b"\n")
