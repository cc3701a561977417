"""The per-run series of `/metrics`: one set per collecting run, for at most
SALVAGE_METRICS_RUNS runs (the newest), so the series Prometheus keeps stay bounded however many
runs exist. A run that leaves collecting drops out (its series go stale); its figures stay on
the dashboard.

- `salvage_run_tasks{run,dataset,state}`: the run's tasks by state, from `recovery.counters`;
- `salvage_run_quarantined_partitions{run,dataset}`: partitions held by quarantine (a run
  reopened by a recovery batch keeps the holds its evaluation decided);
- `salvage_run_provisional_flags{run,dataset}`: partitions flagged early while the run collects
  (`provisional.is_shown`, the flags the run page shows).

Each is one grouped read of the runs' counter rows or partition rows (by run), never a count
over tasks. The run label is the run id; dataset names are operators' names, never a URL.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Count, Sum

from recovery.models import Run, RunPartition, TaskCountDelta
from recovery.ops.metrics import Exposition, collecting_runs
from recovery.quality import provisional
from recovery.states.choices import TaskState


def write(out: Exposition, now: datetime) -> None:
    runs = list(Run.objects.filter(pk__in=collecting_runs()).select_related("dataset"))
    runs.sort(key=lambda run: -run.pk)
    ids = [run.pk for run in runs]
    labels = {run.pk: {"run": str(run.pk), "dataset": run.dataset.name} for run in runs}

    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for run_id, state, n in (
        TaskCountDelta.objects.filter(run_id__in=ids)
        .values_list("run_id", "state")
        .annotate(n=Sum("delta"))
        .order_by()
    ):
        counts[run_id][state] = n or 0
    out.metric(
        "salvage_run_tasks",
        "gauge",
        "Tasks of a collecting run by state (the newest SALVAGE_METRICS_RUNS collecting runs).",
        (
            ({**labels[pk], "state": state}, counts[pk].get(state, 0))
            for pk in ids
            for state in TaskState.values
        ),
    )

    held = dict(
        RunPartition.objects.filter(run_id__in=ids, quarantined=True)
        .values_list("run_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    out.metric(
        "salvage_run_quarantined_partitions",
        "gauge",
        "Partitions of a collecting run held by quarantine.",
        ((labels[pk], held.get(pk, 0)) for pk in ids),
    )

    by_pk = {run.pk: run for run in runs}
    flags: dict[int, int] = defaultdict(int)
    flagged = RunPartition.objects.filter(
        run_id__in=ids, quarantined=False, provisional_at__isnull=False
    )
    for row in flagged:
        if provisional.is_shown(by_pk[row.run_id], row):
            flags[row.run_id] += 1
    out.metric(
        "salvage_run_provisional_flags",
        "gauge",
        "Partitions of a collecting run flagged early (provisional quarantine) and still shown.",
        ((labels[pk], flags.get(pk, 0)) for pk in ids),
    )
