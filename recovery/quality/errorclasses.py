"""The error classes present in a run, with how many settled tasks carry each (batch form).

Distinct classes come from a skip scan of the (run, last_error_class) index: one index probe
per class, however many tasks the run has. The index is partial (`last_error_class > ''`), so
every step says `> ''` (the planner cannot prove it from `> found.c`). Counts stop at
COUNT_CAP per class ("1,000 or more"), so a million-task run costs the same as a small one;
the batch's confirmation page shows the exact number the batch will reset.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from recovery.models import Task
from recovery.states.task import TERMINAL

COUNT_CAP = 1000


@dataclass(frozen=True)
class Present:
    error_class: str
    tasks: int  # settled tasks carrying it, at most COUNT_CAP
    capped: bool

    @property
    def label(self) -> str:
        more = " or more" if self.capped else ""
        return f"{self.error_class} ({self.tasks:,}{more})"


def classes(run_id: int) -> list[str]:
    q = connection.ops.quote_name
    table, err = q(Task._meta.db_table), q("last_error_class")
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE found(c) AS ("
            f" SELECT MIN({err}) FROM {table} WHERE run_id = %s AND {err} > ''"
            f" UNION ALL"
            f" SELECT (SELECT MIN({err}) FROM {table}"
            f" WHERE run_id = %s AND {err} > '' AND {err} > found.c)"
            f" FROM found WHERE found.c IS NOT NULL"
            f") SELECT c FROM found WHERE c IS NOT NULL",
            [run_id, run_id],
        )
        return [row[0] for row in cursor.fetchall()]


def present(run_id: int) -> list[Present]:
    """Each class found in the run with its settled tasks (the ones a batch can reset)."""
    found = []
    for error_class in classes(run_id):
        n = (
            Task.objects.filter(run_id=run_id, last_error_class=error_class, state__in=TERMINAL)
            .order_by()
            .values("pk")[: COUNT_CAP + 1]
            .count()
        )
        if n:
            found.append(Present(error_class, min(n, COUNT_CAP), n > COUNT_CAP))
    return found
