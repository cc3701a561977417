"""The machine's load average around a bench run, and whether the run may be headlined.

Every bench takes the 1/5/15-minute load average before its first measurement and after its
last, prints both, and puts them in its final JSON line with the verdict:

    "loadavg_before": [1m, 5m, 15m], "loadavg_after": [...], "cpus": N,
    "headline": true | false, "headline_reason": "..."

A run may be headlined only when the box was quiet:
- before: the 1-minute load average is at most the number of cores (nobody else was using
  them when the bench started);
- after: the 1-minute load average is at most the number of cores plus the bench's own peak
  of measured processes (the bench's own workers count in the load average; anything above
  that means someone else ran during the measurement).
A run that fails either still prints its figures, with "headline": false and the reason;
bench/README.md records such figures as noisy and never headlines them.
"""

from __future__ import annotations

import os


def headline_verdict(
    before: tuple[float, ...], after: tuple[float, ...], cpus: int, own_processes: int
) -> tuple[bool, str]:
    """(may this run be headlined, why) from the 1-minute load averages around it."""
    if before[0] > cpus:
        return False, f"load average {before[0]:.2f} before the run > {cpus} cores"
    limit = cpus + own_processes
    if after[0] > limit:
        return False, (
            f"load average {after[0]:.2f} after the run > {cpus} cores + {own_processes} "
            "of the bench's own processes"
        )
    return True, (
        f"load average {before[0]:.2f} before (<= {cpus} cores) and {after[0]:.2f} after "
        f"(<= {limit})"
    )


def _fmt(load: tuple[float, ...]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


class LoadWatch:
    """Started before the first measurement; `finish()` after the last one."""

    def __init__(self, own_processes: int = 1) -> None:
        self.cpus = os.cpu_count() or 1
        self.own_processes = own_processes
        self.before = tuple(round(x, 2) for x in os.getloadavg())
        print(f"load average before: {_fmt(self.before)} ({self.cpus} cores)", flush=True)

    def finish(self) -> dict:
        """The load figures and the verdict, for the bench's final JSON line."""
        after = tuple(round(x, 2) for x in os.getloadavg())
        ok, reason = headline_verdict(self.before, after, self.cpus, self.own_processes)
        print(
            f"load average after: {_fmt(after)}; headline: {'yes' if ok else 'NO'} ({reason})",
            flush=True,
        )
        return {
            "loadavg_before": list(self.before),
            "loadavg_after": list(after),
            "cpus": self.cpus,
            "headline": ok,
            "headline_reason": reason,
        }
