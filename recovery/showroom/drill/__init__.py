"""The recovery drill of seed 002 ("Prove recovery before depending on it"), on real processes.

`manage.py drill` (the outer process, `scratch`) creates a scratch database (a SQLite file in a
temporary directory, or a PostgreSQL database next to DATABASE_URL's), then runs
`manage.py drill --inner` in a child environment whose DATABASE_URL names it, so every setting,
worker and check sees only the scratch data. The inner process (`inner`) starts its own sandbox
and real worker processes (`runner`), does harm to them, and then verifies seed 002's seven
properties from the tables (`collection`, `output`) and the webhook scenario (`webhooks`);
`report` says whether they held.

  harm                                          where
  SIGKILL after the fetch, before the commit    runner.Drill.crash_windows(): after_fetch
  SIGKILL inside the commit transaction         runner.Drill.crash_windows(): in_commit
  SIGKILL after COMMIT, before acknowledgement  runner.Drill.crash_windows(): after_commit
  a lease expiring under a slow (paused) worker runner.Drill.collect(): SIGSTOP past the lease
  K SIGKILLs of workers at random moments       runner.Drill.collect(): at seeded progress points
  429 with Retry-After in seconds and as a date the sandbox's "mixed" profile
  a destination timing out after the write      output.delivery_property(): the destination
  the same webhook twice, then Continue         webhooks.webhook_scenario(): the simulator

A property whose machinery is not installed reports ok: false with the reason; nothing is ever
reported as passing without having been checked. This module only hands on the names
`manage.py drill` and the tests use.
"""

from recovery.showroom.drill.collection import task_loss_property
from recovery.showroom.drill.inner import main_inner, play
from recovery.showroom.drill.options import DrillOptions, options_from
from recovery.showroom.drill.report import PROPERTIES, SCENARIOS, format_report, report_ok
from recovery.showroom.drill.scratch import run

__all__ = [
    "PROPERTIES",
    "SCENARIOS",
    "DrillOptions",
    "format_report",
    "main_inner",
    "options_from",
    "play",
    "report_ok",
    "run",
    "task_loss_property",
]
