"""Import a SUCCESS job's results: items by (job, item_index), each task's outcome through
the engine's fenced commit (`leases.commit_outcomes`, fenced by the job and the task's token),
a Continue's re-synchronised rows through the same commit, the job -> completed; one
transaction, fenced by the job's lease token."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from recovery import keys, leases
from recovery.failures import Action, rule_for
from recovery.ops import logs
from recovery.outcomes import ErrorClass, Observed, Outcome
from recovery.providers.remote_base import (
    JobStatus,
    RemoteItem,
    RemoteTask,
    clean_payload,
)
from recovery.remote.jobs import (
    ITEM_POLICY,
    claimed_for,
    guarded,
    provider_for,
    tasks_of,
    worker_label,
)
from recovery.states.choices import HandoffState, RemoteJobState, TaskState
from recovery.states.remote_job import POLLABLE

if TYPE_CHECKING:
    from recovery.models import Observation, RemoteJob

log = logging.getLogger(__name__)


def _entity_key(spec: dict[str, Any], item: RemoteItem, task_url: str = "") -> str:
    rule = (spec or {}).get("entity_key") or {"from": "url"}
    if "field" in rule and item.payload and item.payload.get(rule["field"]) not in (None, ""):
        return str(item.payload[rule["field"]])
    url = item.url or task_url  # a media result has no URL of its own: it is its task's
    try:
        return keys.canonical_url(url)
    except keys.InvalidURL:
        return url


def _task_for(
    item: RemoteItem, tasks: list[RemoteTask], by_url: dict[str, int], kind: str
) -> int | None:
    if len(tasks) == 1 and kind != "batch":
        return tasks[0].task_id
    try:
        return by_url.get(keys.canonical_url(item.task_url or item.url))
    except keys.InvalidURL:
        return None


def import_results(job: RemoteJob, token: int, status: JobStatus) -> bool:
    """Commit a SUCCESS job: items by (job, item_index), observations by key, task outcomes,
    retry job for retriable items, job -> completed, all in one transaction fenced by the
    job's lease token. Safe to repeat (a re-sync after Continue adds only the new items)."""
    from recovery.models import Observation, RemoteJob, RemoteJobItem, Run, Task

    now = timezone.now()
    with transaction.atomic():
        # The fence, and on PostgreSQL the row lock that serialises importers of this job.
        if not RemoteJob.objects.filter(
            pk=job.pk, lease_token=token, state__in=list(POLLABLE)
        ).update(updated_at=now):
            return False
        run = Run.objects.select_related("dataset").get(pk=job.run_id)
        spec = run.dataset.spec or {}
        tasks = tasks_of(job)
        task_rows = {t.pk: t for t in Task.objects.filter(pk__in=[t.task_id for t in tasks])}
        by_url: dict[str, int] = {}
        for t in tasks:
            try:
                by_url[keys.canonical_url(t.url)] = t.task_id
            except keys.InvalidURL:
                by_url[t.url] = t.task_id
        existing = set(RemoteJobItem.objects.filter(job=job).values_list("item_index", flat=True))
        held = {
            pk
            for pk, t in task_rows.items()
            if t.state == TaskState.REMOTE and t.remote_job_id == job.pk
        }

        # Pass 1: classify the new items and decide each held task's outcome.
        new_items: list[tuple[RemoteItem, int | None, ErrorClass | None]] = []
        good: dict[int, int] = defaultdict(int)
        bad: dict[int, list[ErrorClass]] = defaultdict(list)
        reported: set[int] = set()
        for item in status.items:
            task_pk = _task_for(item, tasks, by_url, job.kind)
            if task_pk is not None:
                reported.add(task_pk)
            cls = ITEM_POLICY.get(item.status, ErrorClass.INTERNAL)
            if cls is None and item.payload is None:
                cls = ErrorClass.EMPTY_SHELL
            if item.index in existing:
                continue
            new_items.append((item, task_pk, cls))
            if task_pk is None:
                continue
            if cls is None:
                good[task_pk] += 1
            else:
                bad[task_pk].append(cls)
        if job.kind == "batch":
            for pk in held - reported:
                bad[pk].append(ErrorClass.NETWORK)  # submitted, but the job said nothing of it

        # Pass 2: one Outcome per task this job still holds, committed through the engine's
        # fenced commit (the job + each task's own lease token): observations
        # upserted by key, an attempt per task, counters, retry budgets and corrections of a
        # published run, exactly as for a directly fetched page. A retriable item sends its
        # task to retry_wait; the next submission takes it into a *new* job with a new
        # attempt (RemoteJobItem.retried_in), never this whole job again.
        entity_of: dict[int, str] = {}
        observed: dict[int, list[Observed]] = defaultdict(list)
        for item, task_pk, cls in new_items:
            if cls is None and task_pk is not None:
                task_url = task_rows[task_pk].url if task_pk in task_rows else ""
                entity_of[item.index] = _entity_key(spec, item, task_url)
                observed[task_pk].append(
                    Observed(
                        entity_of[item.index], clean_payload(item.payload) if item.payload else {}
                    )
                )
        claimed: list[leases.Claimed] = []
        outcomes: list[Outcome] = []
        for pk in sorted(held):
            claimed.append(claimed_for(task_rows[pk], run, job))
            outcomes.append(_outcome_for(job, good.get(pk, 0), bad.get(pk, []), observed[pk]))
        summary = leases.commit_outcomes(
            worker_label(job.pk), claimed, outcomes, holder=leases.Holder.job(job.pk)
        )
        # A re-synchronisation (Continue) brings rows for tasks this job no longer holds:
        # their data goes through the same commit, for the tasks still committed (a task
        # reset or retried since belongs to another attempt), so a changed value of a
        # published run becomes a new version and a correction event, never an overwrite.
        resync = sorted(
            pk
            for pk in observed
            if pk not in held and task_rows.get(pk) and task_rows[pk].state == TaskState.COMMITTED
        )
        if resync:
            leases.commit_outcomes(
                worker_label(job.pk),
                [claimed_for(task_rows[pk], run, job) for pk in resync],
                [Outcome(http_status=200, observations=observed[pk]) for pk in resync],
                holder=leases.Holder.resync(job.pk),
            )

        # Items, insert-if-missing by (job, item_index), pointing at their observations.
        obs_by_key: dict[int, Observation] = {}
        wanted = {
            keys.observation_key(run.dataset.name, key, run.window): index
            for index, key in entity_of.items()
        }
        if wanted:
            obs_by_key = {
                wanted[o.observation_key]: o
                for o in Observation.objects.filter(observation_key__in=list(wanted))
            }
        item_rows = []
        for item, task_pk, _cls in new_items:
            obs = obs_by_key.get(item.index)
            item_rows.append(
                RemoteJobItem(
                    job=job,
                    item_index=item.index,
                    url=logs.redact(item.url)[:2000],
                    status=item.status[:32],
                    task_id=task_pk,
                    observation=obs,
                )
            )
        RemoteJobItem.objects.bulk_create(item_rows, ignore_conflicts=True)

        stopped = (status.stopped_reason or "")[:64]
        fields: dict[str, object] = {
            "credits_used": status.credits_used
            if status.credits_used is not None
            else job.credits_used,
            "stopped_reason": stopped,
            "last_response": status.response,
            "lease_owner": "",
            "lease_until": None,
            "last_polled_at": now,
            "poll_failures": 0,
        }
        if status.result_ref:
            fields["result_ref"] = status.result_ref[:500]
        if not guarded(
            job.pk, job.state, RemoteJobState.COMPLETED, fence={"lease_token": token}, **fields
        ):
            raise RuntimeError(f"remote job {job.pk}: lost its lease during the import")

        if stopped:
            note = (
                f"{job.provider} {job.kind} job {job.provider_job_id} stopped early "
                f"({stopped}): its results are incomplete"
            )
            Run.objects.filter(pk=run.pk).exclude(coverage_note__contains=note).update(
                coverage_note=(f"{run.coverage_note}\n{note}" if run.coverage_note else note)
            )
        if status.result_ref and provider_for(run.dataset).handoff:
            from recovery.delivery import outbox

            # The media handoff is its own delivery machine, announced through the outbox in
            # this transaction, once: only the first import moves handoff_state from "", and
            # stamps when our application accepted the delivered result (seed 003).
            if RemoteJob.objects.filter(pk=job.pk, handoff_state="").update(
                handoff_state=HandoffState.UNSENT, result_accepted_at=now
            ):
                outbox.enqueue(
                    run,
                    "media_handoff",
                    {
                        "remote_job": job.pk,
                        "provider": job.provider,
                        "provider_job_id": job.provider_job_id,
                        "result_ref": status.result_ref,
                    },
                )
    log.info(
        "remote job %s: imported %d new items; tasks %s",
        job.pk,
        len(new_items),
        summary.states or "unchanged",
    )
    return True


def _outcome_for(
    job: RemoteJob, good: int, bad: list[ErrorClass], observed: list[Observed]
) -> Outcome:
    """A task's result in this job: success if any item succeeded (or, for crawl/search/cloud
    jobs, if none failed); otherwise its items' worst class (a non-retriable one wins)."""
    where = {"reason": f"{job.provider} {job.kind} job {job.provider_job_id} (remote job {job.pk})"}
    if good or (job.kind != "batch" and not bad):
        return Outcome(http_status=200, observations=observed)
    classes = bad or [ErrorClass.NETWORK]
    final = [c for c in classes if rule_for(c).action != Action.RETRY]
    error_class = final[0] if final else classes[0]
    return Outcome(
        error_class=error_class,
        error_detail=f"item status {error_class} in {where['reason']}",
        artefact=where,
    )
