"""Prometheus text for `/metrics`: cheap, bounded reads of the tables that already hold the truth.

Every figure comes from an indexed, bounded query or a maintained counter, never a scan of the
attempt or task table: task states from `recovery.counters` (summed over the most recent runs),
claims and commits from the workers' heartbeat counters, lease expiries and the oldest due task
from the claim index, the last commit from the (run, finished_at, outcome) index of the recent
runs, retries by class from the (run, state) index of the collecting runs, polls from the
remote-job due index, deliveries from the outbox due index. Only counts, state names, run ids,
dataset and schedule names are exported: no URL, payload, job id or credential.

`render` writes the engine's figures; the wings above this floor add their own sections (the
per-run series, the schedules), which the root URL conf passes to the view.
The alerts that read these series are in deploy/prometheus/alerts.yml.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from recovery.ops import liveness

# How many recent runs the task-state gauges and the last commit cover (each adds a few counter
# rows to sum, or one index probe).
RECENT_RUNS = 100
# The oldest due task is found by walking the claim index one priority at a time (two index
# probes each); past this many distinct priorities the figure covers the highest ones only.
PRIORITY_WALK = 32


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Exposition:
    """The text being written: one HELP and TYPE line per metric, then its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[dict[str, str], float | int | None]],
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            if labels:
                inner = ",".join(f'{key}="{_escape(str(val))}"' for key, val in labels.items())
                self.lines.append(f"{name}{{{inner}}} {_number(value)}")
            else:
                self.lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# A section of a higher wing: writes its metrics at `now` (recovery.urls names them).
Section = Callable[[Exposition, datetime], None]


def _number(value: float | int | None) -> str:
    if value is None:
        return "0"
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return str(int(value))


def collecting_runs(limit: int | None = None) -> list[int]:
    """The ids of the most recent collecting runs, newest first: the runs whose retry classes,
    attempt outcomes and per-run series are exported (SALVAGE_METRICS_RUNS of them)."""
    from django.conf import settings

    from recovery.models import Run
    from recovery.states.choices import RunState

    limit = limit or settings.SALVAGE_METRICS_RUNS
    return list(
        Run.objects.filter(acceptance_state=RunState.COLLECTING)
        .order_by("-pk")
        .values_list("pk", flat=True)[:limit]
    )


def render(sections: Iterable[Section] = ()) -> str:
    """The whole exposition (text format 0.0.4): the engine's figures, then `sections`."""
    now = timezone.now()
    out = Exposition()
    _build_info(out)
    _runs_and_tasks(out, now)
    _workers(out, now)
    _attempts(out)
    _remote_jobs(out, now)
    _deliveries(out, now)
    for section in sections:
        section(out, now)
    return out.text()


def _build_info(out: Exposition) -> None:
    from importlib import metadata

    try:
        version = metadata.version("salvage")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        version = "unknown"
    out.metric(
        "salvage_build_info",
        "gauge",
        "Always 1; the installed Salvage version is its label.",
        [({"version": version}, 1)],
    )


def _runs_and_tasks(out: Exposition, now: datetime) -> None:
    from recovery.models import Run, RunPartition, Task, TaskCountDelta
    from recovery.states.choices import RunState, TaskState

    # Runs by acceptance state: the run table is small (one row per dataset and window).
    runs = dict(Run.objects.values_list("acceptance_state").annotate(n=Count("pk")).order_by())
    out.metric(
        "salvage_runs",
        "gauge",
        "Runs by acceptance state.",
        (({"state": s}, runs.get(s, 0)) for s in RunState.values),
    )

    # Tasks by state over the most recent runs, from the append-only counters (a few rows per
    # run and partition after compaction), never a COUNT over the task table.
    recent = list(Run.objects.order_by("-pk").values_list("pk", flat=True)[:RECENT_RUNS])
    tasks = dict(
        TaskCountDelta.objects.filter(run_id__in=recent)
        .values_list("state")
        .annotate(n=Sum("delta"))
        .order_by()
    )
    out.metric(
        "salvage_tasks",
        "gauge",
        f"Tasks by state, summed over the {RECENT_RUNS} most recent runs.",
        (({"state": s}, tasks.get(s, 0)) for s in TaskState.values),
    )

    # Partitions held by quarantine in the same runs, through runpartition_uniq (run, name):
    # the number grows when an evaluation holds a partition (a retailer's pages went bad).
    held = RunPartition.objects.filter(run_id__in=recent, quarantined=True).count()
    out.metric(
        "salvage_quarantined_partitions",
        "gauge",
        f"Partitions held by quarantine, over the {RECENT_RUNS} most recent runs.",
        [({}, held)],
    )

    # Lease expiries right now: leased tasks whose lease has run out (the claim index covers
    # state IN (pending, retry_wait, leased) ordered by next_attempt_at = lease_until).
    expired_now = Task.objects.filter(
        state=TaskState.LEASED, next_attempt_at__lt=now, lease_until__lt=now
    ).count()
    out.metric(
        "salvage_leases_expired",
        "gauge",
        "Leased tasks whose lease has expired and that another worker may claim now.",
        [({}, expired_now)],
    )

    oldest = oldest_due_task(now)
    out.metric(
        "salvage_oldest_due_task_age_seconds",
        "gauge",
        "Seconds the oldest due task has waited: pending or retry_wait whose time has come, or "
        "leased with an expired lease (from its due time); 0 when no task is due.",
        [({}, max((now - oldest).total_seconds(), 0.0) if oldest else 0)],
    )

    last = last_commit(recent)
    out.metric(
        "salvage_last_commit_timestamp_seconds",
        "gauge",
        f"Unix time of the newest attempt that committed a page (outcome committed), over the "
        f"{RECENT_RUNS} most recent runs; 0 when none did.",
        [({}, last.timestamp() if last else 0)],
    )


def last_commit(run_ids: list[int]) -> datetime | None:
    """When the newest attempt that committed a page of these runs finished (None: none did).

    One backward probe per run of its range of attempt_run_finished_idx (run, finished_at,
    outcome): the newest attempts first, stopping at the first committed one."""
    from recovery.models import Attempt, Run

    newest = (
        Attempt.objects.filter(
            run_id=OuterRef("pk"),
            outcome=Attempt.Outcome.COMMITTED,
            finished_at__isnull=False,
        )
        .order_by("-finished_at")
        .values("finished_at")[:1]
    )
    found = [
        at
        for at in Run.objects.filter(pk__in=run_ids)
        .annotate(last=Subquery(newest))
        .values_list("last", flat=True)
        if at is not None
    ]
    return max(found, default=None)


def oldest_due_task(now: datetime) -> datetime | None:
    """When the longest-waiting due task became due (None: nothing is due).

    task_claim_idx is (priority DESC, next_attempt_at) over the claimable states, so the
    earliest next_attempt_at of one priority is the first entry of its range: the walk reads
    one entry per priority and one to find the next priority, never the index's whole length
    (a run of a million pending tasks has a million entries there)."""
    from recovery.models import Task
    from recovery.states.choices import CLAIMABLE_ORDER

    claimable = Task.objects.filter(state__in=CLAIMABLE_ORDER)
    oldest = None
    priority = claimable.order_by("-priority").values_list("priority", flat=True).first()
    for _ in range(PRIORITY_WALK):
        if priority is None:
            break
        first = (
            claimable.filter(priority=priority, next_attempt_at__lte=now)
            .order_by("next_attempt_at")
            .values_list("next_attempt_at", flat=True)
            .first()
        )
        if first is not None and (oldest is None or first < oldest):
            oldest = first
        priority = (
            claimable.filter(priority__lt=priority)
            .order_by("-priority")
            .values_list("priority", flat=True)
            .first()
        )
    return oldest


def _workers(out: Exposition, now: datetime) -> None:
    from recovery.models import WorkerHeartbeat

    # Claims and commits: each worker process keeps running totals in its heartbeat row (rows
    # are never deleted, so the sums only grow).
    workers = WorkerHeartbeat.objects.aggregate(claimed=Sum("claimed"), committed=Sum("committed"))
    out.metric(
        "salvage_claims_total",
        "counter",
        "Tasks claimed by all workers (from worker heartbeat counters).",
        [({}, workers["claimed"])],
    )
    out.metric(
        "salvage_commits_total",
        "counter",
        "Task outcomes committed by all workers (from worker heartbeat counters).",
        [({}, workers["committed"])],
    )
    out.metric(
        "salvage_workers_alive",
        "gauge",
        f"Processes alive by kind (a heartbeat in the last "
        f"{liveness.thresholds().alive:g} s; recovery.ops.liveness). Task workers are the "
        f"kinds {' and '.join(liveness.TASK_WORKER_KINDS)}.",
        (({"kind": kind}, n) for kind, n in liveness.alive_by_kind(now).items()),
    )


def _attempts(out: Exposition) -> None:
    from recovery.models import Attempt, Task
    from recovery.states.choices import TaskState

    # Attempt outcomes and retry classes of the collecting runs, through the (run, outcome) and
    # (run, state) indexes, bounded to the newest SALVAGE_METRICS_RUNS of them.
    # Gauges, not counters: they count rows of the runs still collecting, so they fall when a
    # run leaves collecting, which Prometheus would read as a counter reset (and rate() would
    # count the remaining runs' whole history again). A true counter needs a totals row that
    # every commit writes (a row each committer would lock, on the hot path) or a count over
    # every attempt ever made (unbounded): neither is worth it for figures the state gauges and
    # these per-run counts already give.
    active = collecting_runs()
    outcomes = dict(
        Attempt.objects.filter(run_id__in=active)
        .values_list("outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    out.metric(
        "salvage_attempts",
        "gauge",
        "Attempts of the runs still collecting, by outcome "
        "(lost_lease = a commit fenced out after its lease expired).",
        (({"outcome": o}, outcomes.get(o, 0)) for o in Attempt.Outcome.values),
    )
    retry_classes = (
        Task.objects.filter(run_id__in=active, state=TaskState.RETRY_WAIT)
        .values_list("last_error_class")
        .annotate(n=Count("pk"))
        .order_by()
    )
    out.metric(
        "salvage_retries_waiting",
        "gauge",
        "Tasks waiting for a retry, by the failure class of their last attempt.",
        (({"error_class": cls or "unknown"}, n) for cls, n in retry_classes),
    )
    retried = (
        Attempt.objects.filter(run_id__in=active, outcome=Attempt.Outcome.RETRY)
        .values_list("error_class")
        .annotate(n=Count("pk"))
        .order_by()
    )
    out.metric(
        "salvage_retry_attempts",
        "gauge",
        "Attempts that ended in a retry, by failure class (runs still collecting).",
        (({"error_class": cls or "unknown"}, n) for cls, n in retried),
    )


def _remote_jobs(out: Exposition, now: datetime) -> None:
    from recovery.models import RemoteJob, WebhookReceipt
    from recovery.states.choices import RemoteJobState

    # Remote jobs and polls (the remote-job table holds one row per submission).
    jobs = dict(RemoteJob.objects.values_list("state").annotate(n=Count("pk")).order_by())
    out.metric(
        "salvage_remote_jobs",
        "gauge",
        "Remote provider jobs by state (unknown and lookup_failed wait in the reconcile queue).",
        (({"state": s}, jobs.get(s, 0)) for s in RemoteJobState.values),
    )
    polling = [RemoteJobState.SUBMITTED, RemoteJobState.PENDING]
    polls = RemoteJob.objects.aggregate(
        due=Count("pk", filter=Q(state__in=polling, next_poll_at__lte=now)),
        failures=Sum("poll_failures", filter=Q(state__in=polling)),
    )
    out.metric(
        "salvage_polls_due",
        "gauge",
        "Remote jobs whose next status poll is due now.",
        [({}, polls["due"])],
    )
    # A gauge: a job's count of failed polls goes back to 0 when a poll answers.
    out.metric(
        "salvage_poll_failures",
        "gauge",
        "Failed status polls in a row, summed over the jobs being polled.",
        [({}, polls["failures"])],
    )
    out.metric(
        "salvage_webhooks_received_total",
        "counter",
        "Provider webhook notifications received.",
        [({}, WebhookReceipt.objects.count())],
    )


def _deliveries(out: Exposition, now: datetime) -> None:
    from django.conf import settings

    from recovery.models import OutboxEvent
    from recovery.states.choices import DeliveryState

    # Deliveries (outbox): one row per accepted/published/correction event.
    deliveries = dict(OutboxEvent.objects.values_list("state").annotate(n=Count("pk")).order_by())
    out.metric(
        "salvage_deliveries",
        "gauge",
        "Outbox deliveries by state.",
        (({"state": s}, deliveries.get(s, 0)) for s in DeliveryState.values),
    )
    # The first entry of the unsent range of outbox_due_idx (state, next_attempt_at).
    oldest = (
        OutboxEvent.objects.filter(state=DeliveryState.UNSENT, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    out.metric(
        "salvage_oldest_unsent_delivery_age_seconds",
        "gauge",
        "Seconds the oldest unsent delivery has been due (never sent); 0 when none.",
        [({}, (now - oldest).total_seconds() if oldest else 0)],
    )
    sends = OutboxEvent.objects.aggregate(n=Sum("attempts"))
    out.metric(
        "salvage_delivery_attempts_total",
        "counter",
        "Delivery attempts made by the outbox sender.",
        [({}, sends["n"])],
    )
    out.metric(
        "salvage_queue_wakeups",
        "gauge",
        "Wake-ups waiting in the django-q2 ORM broker (0 with the Redis broker).",
        [({}, _orm_queue_size(settings.Q_CLUSTER))],
    )


def _orm_queue_size(q_cluster: dict) -> int:
    if "orm" not in q_cluster:
        return 0
    from django_q.models import OrmQ

    return OrmQ.objects.count()


def authorised(header: str) -> bool:
    """With SALVAGE_METRICS_TOKEN set, `/metrics` needs `Authorization: Bearer <token>`."""
    import hmac

    from django.conf import settings

    token = getattr(settings, "SALVAGE_METRICS_TOKEN", "")
    if not token:
        return True
    return hmac.compare_digest(header.encode(), f"Bearer {token}".encode())
