"""Prometheus text for `/metrics`: cheap, bounded reads of the tables that already hold the truth.

Every figure comes from an indexed, bounded query or a maintained counter, never a scan of the
attempt or task table: task states from `recovery.counters` (summed over the most recent runs),
claims and commits from the workers' heartbeat counters, lease expiries from the claim index,
retries by class from the (run, state) index of the active runs, polls from the remote-job due
index, deliveries from the outbox due index. Only counts and state names are exported: no URL,
dataset payload, job id or credential ever appears here.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, Q, Sum
from django.utils import timezone

from recovery import liveness

# How many recent runs the task-state gauges cover (each adds a few counter rows to sum).
RECENT_RUNS = 100
# Runs whose retry classes and attempt outcomes are counted (the active ones, newest first).
ACTIVE_RUNS = 20


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[dict[str, str], float]],
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


def _number(value: float | int | None) -> str:
    if value is None:
        return "0"
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    return str(int(value))


def render() -> str:
    """The whole exposition (text format 0.0.4)."""
    from recovery.models import (
        Attempt,
        OutboxEvent,
        RemoteJob,
        Run,
        Task,
        TaskCountDelta,
        WebhookReceipt,
        WorkerHeartbeat,
    )
    from recovery.states.delivery import DeliveryState
    from recovery.states.remote_job import RemoteJobState
    from recovery.states.run import RunState
    from recovery.states.task import TaskState

    now = timezone.now()
    out = _Writer()

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

    # Claims and commits: each worker process keeps running totals in its heartbeat row.
    workers = WorkerHeartbeat.objects.aggregate(
        claimed=Sum("claimed"),
        committed=Sum("committed"),
        alive=Count("pk", filter=liveness.alive_q(now)),
    )
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
        f"Worker processes alive (a heartbeat in the last "
        f"{liveness.thresholds().alive:g} s; recovery.liveness).",
        [({}, workers["alive"])],
    )

    # Lease expiries. Right now: leased tasks whose lease has run out (the claim index covers
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

    # Attempt outcomes and retry classes of the active runs, through the (run, outcome) and
    # (run, state) indexes. Bounded to the newest ACTIVE_RUNS runs still collecting.
    active = list(
        Run.objects.filter(acceptance_state=RunState.COLLECTING)
        .order_by("-pk")
        .values_list("pk", flat=True)[:ACTIVE_RUNS]
    )
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
        ((({"outcome": o}), outcomes.get(o, 0)) for o in Attempt.Outcome.values),
    )
    out.metric(
        "salvage_lease_expiries_total",
        "counter",
        "Commits refused because the worker's lease had expired (runs still collecting).",
        [({}, outcomes.get(Attempt.Outcome.LOST_LEASE, 0))],
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
        "salvage_retries_total",
        "counter",
        "Attempts that ended in a retry, by failure class (runs still collecting).",
        (({"error_class": cls or "unknown"}, n) for cls, n in retried),
    )

    # Remote jobs and polls (the remote-job table holds one row per submission).
    jobs = dict(RemoteJob.objects.values_list("state").annotate(n=Count("pk")).order_by())
    out.metric(
        "salvage_remote_jobs",
        "gauge",
        "Remote provider jobs by state.",
        (({"state": s}, jobs.get(s, 0)) for s in RemoteJobState.values),
    )
    polls = RemoteJob.objects.aggregate(
        due=Count("pk", filter=Q(state__in=_polling_states(), next_poll_at__lte=now)),
        failures=Sum("poll_failures"),
    )
    out.metric(
        "salvage_polls_due",
        "gauge",
        "Remote jobs whose next status poll is due now.",
        [({}, polls["due"])],
    )
    out.metric(
        "salvage_poll_failures_total",
        "counter",
        "Failed status polls of remote jobs.",
        [({}, polls["failures"])],
    )
    out.metric(
        "salvage_webhooks_received_total",
        "counter",
        "Provider webhook notifications received.",
        [({}, WebhookReceipt.objects.count())],
    )

    # Deliveries (outbox): one row per accepted/published/correction event.
    deliveries = dict(OutboxEvent.objects.values_list("state").annotate(n=Count("pk")).order_by())
    out.metric(
        "salvage_deliveries",
        "gauge",
        "Outbox deliveries by state.",
        (({"state": s}, deliveries.get(s, 0)) for s in DeliveryState.values),
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
        [({}, _orm_queue_size())],
    )
    return out.text()


def _polling_states() -> list[str]:
    from recovery.states.remote_job import RemoteJobState

    return [RemoteJobState.SUBMITTED, RemoteJobState.PENDING]


def _orm_queue_size() -> int:
    from django.conf import settings

    if "orm" not in settings.Q_CLUSTER:
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
