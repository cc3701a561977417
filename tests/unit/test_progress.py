"""recovery.ops.progress: a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from recovery.ops.progress import Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_it_writes_plain_lines_at_the_interval_when_not_a_tty():
    stream, clock = io.StringIO(), FakeClock()
    with Progress(
        "createrun", total=1000, unit="tasks", stream=stream, interval=5, clock=clock
    ) as p:
        p.advance(100)  # too soon for a line
        clock.now += 5
        p.advance(400)
        clock.now += 1
        p.advance(500)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("createrun  50% 500/1,000 tasks 100/s 5s ETA 5s")
    assert lines[1].startswith("createrun 100% 1,000/1,000 tasks 167/s 6s")
    assert "\r" not in stream.getvalue()


def test_it_draws_a_bar_with_rate_on_a_tty():
    stream, clock = io.StringIO(), FakeClock()
    p = Progress("work", total=10, unit="tasks", stream=stream, tty=True, clock=clock)
    clock.now += 2
    p.advance(5)
    p.close()
    text = stream.getvalue()
    assert "\r\x1b[2Kwork [##############..............]  50% 5/10 tasks 2.5/s" in text
    assert text.endswith("\n")


def test_it_counts_without_a_total():
    stream, clock = io.StringIO(), FakeClock()
    p = Progress("export", unit="rows", stream=stream, clock=clock)
    clock.now += 10
    p.update(2500, note="jsonl")
    p.close()
    assert stream.getvalue().splitlines()[-1] == "export 2,500 rows 250/s 10s jsonl"


def test_it_stays_silent_when_disabled_and_survives_a_closed_stream():
    stream = io.StringIO()
    Progress("x", total=1, stream=stream, enabled=False).close()
    assert stream.getvalue() == ""
    closed = io.StringIO()
    closed.close()
    p = Progress("x", total=1, stream=closed, tty=True)
    p.advance()
    p.close()  # no exception


def test_a_work_process_shows_its_last_figures_once_when_it_stops_however_short_its_run():
    from types import SimpleNamespace

    from recovery.ops.progress import watch_worker

    stream = io.StringIO()
    stats = SimpleNamespace(committed=0, attempts=0, claims=0)
    watch = watch_worker("w-1", stats, stream=stream)
    stats.committed, stats.attempts, stats.claims = 6, 7, 2
    assert watch("w-1") is False  # a step that never claims it did work
    assert stream.getvalue() == ""  # sooner than the interval: no line yet
    watch.close()
    watch.close()
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("work w-1 6 tasks committed") and "7 attempts, 2 claims" in line
