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
- during: other processes' CPU was at most FOREIGN_LIMIT of the box over the run. The load
  average lags by a minute and misses another load that starts and stops within a run, so the
  machine's busy time (/proc/stat: user, nice, system) is read at both ends and the bench's
  own share subtracted: its process and its children, reaped or alive (rusage, /proc), and
  PostgreSQL's processes (their own time and the time of the backends the postmaster reaped).
  What is left is someone else's: "foreign_cpu_share" = that / (wall seconds x cores).
  PostgreSQL's processes all count as the bench's own (its backends come and go), so a
  foreign load made only of database work goes unseen by this rule.
A run that fails any of them still prints its figures, with "headline": false and the reason;
bench/README.md records such figures as noisy and never headlines them.
"""

from __future__ import annotations

import os
import resource
import time

FOREIGN_LIMIT = 0.10  # of the box (wall seconds x cores): ~0.2 of a core on 2 cores


def headline_verdict(
    before: tuple[float, ...],
    after: tuple[float, ...],
    cpus: int,
    own_processes: int,
    foreign_share: float | None = None,
) -> tuple[bool, str]:
    """(may this run be headlined, why) from the 1-minute load averages around it and the
    share of the box other processes used during it (None: not measured)."""
    if foreign_share is not None and foreign_share > FOREIGN_LIMIT:
        return False, (
            f"other processes used {foreign_share:.0%} of the {cpus} cores during the run "
            f"(> {FOREIGN_LIMIT:.0%})"
        )
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


# --- CPU time: the box's, the bench's own, PostgreSQL's ---------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def box_busy_seconds() -> float | None:
    """User, nice and system time of every core since boot (None off Linux). Interrupt, steal
    and idle time are left out: no process spends them."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    user, nice, system = (int(x) for x in fields[1:4])
    return (user + nice + system) / _TICK


def _proc_stats() -> list[tuple[int, int, str, float]]:
    """(pid, ppid, command name, CPU seconds incl. reaped children) of every live process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue  # it ended meanwhile
        name = text[text.index("(") + 1 : text.rindex(")")]
        rest = text[text.rindex(")") + 2 :].split()
        # After the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based here.
        cpu = sum(int(x) for x in rest[11:15]) / _TICK
        found.append((int(entry), int(rest[1]), name, cpu))
    return found


def own_seconds() -> float:
    """CPU of this process, its reaped children, its live descendants, and PostgreSQL."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime
    procs = _proc_stats()
    children: dict[int, list[tuple[int, float]]] = {}
    for pid, ppid, name, cpu in procs:
        children.setdefault(ppid, []).append((pid, cpu))
        if name.startswith("postgres"):
            total += cpu
    stack = [pid for pid, _cpu in children.get(os.getpid(), [])]
    by_pid = {pid: cpu for pid, _ppid, name, cpu in procs if not name.startswith("postgres")}
    while stack:
        pid = stack.pop()
        total += by_pid.get(pid, 0.0)  # its reaped children are in its cutime/cstime
        stack.extend(child for child, _cpu in children.get(pid, []))
    return total


def foreign_share(start: tuple[float, float, float], end: tuple[float, float, float], cpus: int):
    """Other processes' share of the box between two (wall, busy, own) readings."""
    wall = end[0] - start[0]
    if wall <= 0:
        return 0.0
    foreign = (end[1] - start[1]) - (end[2] - start[2])
    return max(0.0, foreign) / (wall * cpus)


def _fmt(load: tuple[float, ...]) -> str:
    return " ".join(f"{x:.2f}" for x in load)


class LoadWatch:
    """Started before the first measurement; `finish()` after the last one."""

    def __init__(self, own_processes: int = 1) -> None:
        self.cpus = os.cpu_count() or 1
        self.own_processes = own_processes
        self.before = tuple(round(x, 2) for x in os.getloadavg())
        self.start = self._reading()
        print(f"load average before: {_fmt(self.before)} ({self.cpus} cores)", flush=True)

    @staticmethod
    def _reading() -> tuple[float, float, float] | None:
        busy = box_busy_seconds()
        return None if busy is None else (time.monotonic(), busy, own_seconds())

    def finish(self) -> dict:
        """The load figures and the verdict, for the bench's final JSON line."""
        after = tuple(round(x, 2) for x in os.getloadavg())
        end = self._reading()
        share = None
        if self.start is not None and end is not None:
            share = round(foreign_share(self.start, end, self.cpus), 3)
        ok, reason = headline_verdict(self.before, after, self.cpus, self.own_processes, share)
        during = "" if share is None else f"; other processes {share:.0%} of the box"
        print(
            f"load average after: {_fmt(after)}{during}; headline: {'yes' if ok else 'NO'} "
            f"({reason})",
            flush=True,
        )
        return {
            "loadavg_before": list(self.before),
            "loadavg_after": list(after),
            "cpus": self.cpus,
            "foreign_cpu_share": share,
            "headline": ok,
            "headline_reason": reason,
        }
