"""Progress for long commands: a bar with rate and ETA on a terminal, log lines otherwise.

    with Progress("createrun", total=len(rows), unit="tasks") as progress:
        for chunk in chunks:
            ...
            progress.advance(len(chunk))

Output goes to stderr by default, so a command's stdout contract (e.g. createrun's run id on its
last line, drill --json's one object) is never disturbed. On a terminal the bar redraws at most
ten times a second; elsewhere (CI, files, pipes) one plain line is written every `interval`
seconds and once at the end, so logs stay readable and short. With SALVAGE_LOG_FORMAT=json
those lines are JSON objects (event `progress`, with `done`, `total` and `rate`), and no bar is
drawn even on a terminal: every line a process writes is then JSON.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Protocol, TypeVar

from recovery.ops import logs

T = TypeVar("T")


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """Count work done towards an optional total and show it (see the module docstring)."""

    BAR_WIDTH = 28

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "items",
        stream: IO[str] | None = None,
        interval: float = 10.0,
        tty: bool | None = None,
        enabled: bool = True,
        clock=time.monotonic,
    ):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = enabled
        self.clock = clock
        self.json = logs.json_format()
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty and not self.json
        self.done = 0
        self.note = ""
        self.started = clock()
        self._last_draw = float("-inf")
        self._last_line = self.started
        self._closed = False

    # --- counting ---------------------------------------------------------------------------
    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.update(self.done + n, note)

    def update(self, done: int, note: str | None = None) -> None:
        """Set the absolute amount done (e.g. a count read from the database)."""
        self.done = done
        if note is not None:
            self.note = note
        self._maybe_draw()

    def set_total(self, total: int | None) -> None:
        self.total = total
        self._maybe_draw()

    # --- rendering --------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.started

    def rate(self) -> float:
        return _rate(self.done, self.elapsed())

    def render(self) -> str:
        elapsed = self.elapsed()
        rate = _rate(self.done, elapsed)
        parts = [self.label]
        if self.total:
            fraction = min(1.0, self.done / self.total)
            if self.tty:
                filled = int(fraction * self.BAR_WIDTH)
                parts.append("[" + "#" * filled + "." * (self.BAR_WIDTH - filled) + "]")
            parts.append(f"{fraction:4.0%}")
            parts.append(f"{self.done:,}/{self.total:,} {self.unit}")
        else:
            parts.append(f"{self.done:,} {self.unit}")
        parts.append(f"{rate:,.0f}/s" if rate >= 10 else f"{rate:,.1f}/s")
        parts.append(_duration(elapsed))
        if self.total and rate > 0 and self.done < self.total:
            parts.append(f"ETA {_duration((self.total - self.done) / rate)}")
        if self.note:
            parts.append(self.note)
        return " ".join(parts)

    def _maybe_draw(self, force: bool = False) -> None:
        if not self.enabled or self._closed:
            return
        now = self.clock()
        if self.tty:
            if force or now - self._last_draw >= 0.1:
                self._last_draw = now
                self._write("\r\x1b[2K" + self.render())
        elif force or now - self._last_line >= self.interval:
            self._last_line = now
            self._line(self.render())

    def _line(self, text: str, event: str = "progress") -> None:
        if self.json:
            text = logs.json_line(
                "recovery.ops.progress",
                event,
                text,
                label=self.label,
                done=self.done,
                total=self.total,
                rate=round(self.rate(), 1),
            )
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe must not break the work itself
            self.enabled = False

    def log(self, message: str) -> None:
        """Print a line without garbling the bar."""
        if not self.enabled:
            return
        if self.tty:
            self._write("\r\x1b[2K" + message + "\n")
            self._last_draw = float("-inf")
            self._maybe_draw()
        else:
            self._line(message, "progress_note")

    def close(self, note: str | None = None) -> None:
        """Draw the final state once and end the line."""
        if self._closed:
            return
        if note is not None:
            self.note = note
        if self.enabled:
            if self.tty:
                self._write("\r\x1b[2K" + self.render() + "\n")
            else:
                self._line(self.render())
        self._closed = True

    def __enter__(self) -> Progress:
        self._maybe_draw(force=self.tty)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("interrupted" if exc_type is KeyboardInterrupt else None)


def counted(
    iterable: Iterable[T],
    label: str,
    *,
    total: int | None = None,
    unit: str = "items",
    count: Callable[[T], int] = lambda item: 1,
    stream: IO[str] | None = None,
) -> Iterator[T]:
    """Yield from `iterable`, counting `count(item)` per item (e.g. rows in an export chunk)."""
    with Progress(label, total=total, unit=unit, stream=stream) as progress:
        for item in iterable:
            yield item
            progress.advance(count(item))


class LoopCounts(Protocol):
    """What a worker loop counts (recovery.worker.LoopStats, which sits above this module)."""

    claims: int
    attempts: int

    @property
    def committed(self) -> int: ...


class WorkerWatch:
    """A worker loop step (`worker.run_forever(extra_steps=...)`) that shows what a
    `manage.py work` process's loop counted into `stats`: tasks committed and their rate, with
    attempts and claims beside them (a retried task is claimed and tried more than once, so
    neither is a count of tasks). It never claims it did work. `close()` draws the last state
    once, as every Progress does at its end."""

    def __init__(self, worker_id: str, stats: LoopCounts, stream: IO[str] | None = None):
        self.stats = stats
        self.progress = Progress(f"work {worker_id}", unit="tasks committed", stream=stream)

    def __call__(self, _worker_id: str) -> bool:
        self.progress.update(self.stats.committed, note=self._note())
        return False

    def _note(self) -> str:
        return f"{self.stats.attempts:,} attempts, {self.stats.claims:,} claims"

    def close(self) -> None:
        self.progress.done = self.stats.committed
        self.progress.close(self._note())


def watch_worker(
    worker_id: str, stats: LoopCounts, *, stream: IO[str] | None = None
) -> WorkerWatch:
    return WorkerWatch(worker_id, stats, stream)
