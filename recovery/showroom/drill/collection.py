"""What the collection must show after the harm: seed 002's first three properties, and
Retry-After honoured in both its forms. Pure reads of the scratch database.

In: the run, the task keys the manifest intended, the seed (the sandbox predicts each page's
final state from it). Out: figures (`verify_tasks`: lost, duplicated, untraceable, stale
writes accepted; `expected_final_states`: pages that ended other than predicted;
`retry_after_figures`), and `task_loss_property`, the verdict on `no_intended_task_lost`.
"""

from __future__ import annotations

from typing import Any


def verify_tasks(run_id: int, expected_keys: set[str], sandbox: dict | None) -> dict[str, Any]:
    from django.db.models import Count, F, Max, Q

    from recovery.models import Attempt, Observation, Task
    from recovery.states.task import TERMINAL

    tasks = Task.objects.filter(run_id=run_id)
    keys = set(tasks.values_list("task_key", flat=True))
    missing = len(expected_keys - keys)
    unfinished = tasks.exclude(state__in=TERMINAL).count()
    by_state = dict(tasks.values_list("state").annotate(n=Count("pk")).order_by())

    observations = Observation.objects.filter(run_id=run_id)
    obs_total = observations.count()
    by_entity = observations.values("entity_key").annotate(n=Count("pk")).filter(n__gt=1).order_by()
    dup_entities = sum(row["n"] - 1 for row in by_entity)
    by_task = observations.values("source_task").annotate(n=Count("pk")).filter(n__gt=1).order_by()
    dup_tasks = sum(row["n"] - 1 for row in by_task)

    attempts = Attempt.objects.filter(run_id=run_id)
    attempt_total = attempts.count()
    untraceable = attempts.filter(
        Q(worker="")
        | Q(outcome="")
        | Q(started_at__isnull=True)
        | (Q(finished_at__isnull=True) & ~Q(outcome__in=["running", "submitted"]))
        | (Q(outcome__in=["retry", "quarantined", "dead", "gone"]) & Q(error_class=""))
    ).count()
    # Every terminal task must show at least one attempt that explains how it got there.
    terminal_without_attempt = (
        tasks.filter(state__in=TERMINAL).annotate(n=Count("attempts")).filter(n=0).count()
    )
    committed_without_commit = (
        tasks.filter(state="committed")
        .annotate(n=Count("attempts", filter=Q(attempts__outcome="committed")))
        .filter(n=0)
        .count()
    )
    obs_without_source = observations.filter(source_attempt__isnull=True).count()
    # A stale write accepted: two committed attempts for one task in one scope (the run, or
    # one recovery batch), or an observation written by an attempt whose lease was not the
    # task's last one in that scope.
    doubles = (
        attempts.filter(outcome="committed")
        .values("task", "recovery_batch")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
        .order_by()
    )
    stale = sum(row["n"] - 1 for row in doubles)
    stale += (
        observations.filter(
            source_attempt__isnull=False,
            source_attempt__lease_token__lt=F("source_task__lease_token"),
        )
        .exclude(source_task__recovery_batch__isnull=False)
        .count()
    )
    # Crashes are budgeted apart from retries: how close any page came to a crash loop.
    crashes = tasks.aggregate(
        crash_loops=Count("pk", filter=Q(last_error_class="worker_crash_loop")),
        max_crash_count=Max("crash_count"),
    )
    figures = {
        "tasks": len(keys),
        "lost_lease_attempts": attempts.filter(outcome="lost_lease").count(),
        "crash_loops": crashes["crash_loops"],
        "max_crash_count": crashes["max_crash_count"] or 0,
        "tasks_by_state": by_state,
        "missing_task_keys": missing,
        "unfinished_tasks": unfinished,
        "attempts": attempt_total,
        "observations": obs_total,
        "duplicate_entities": dup_entities,
        "duplicate_per_task": dup_tasks,
        "untraceable_attempts": untraceable,
        "terminal_without_attempt": terminal_without_attempt,
        "committed_without_committed_attempt": committed_without_commit,
        "observations_without_source_attempt": obs_without_source,
        "stale_writes_accepted": stale,
    }
    if sandbox is not None:
        figures["unexpected_final_states"] = sandbox.get("unexpected_final_states")
    return figures


def expected_final_states(run_id: int, seed: int, profile: str, bad_retailer: bool) -> dict:
    """Compare each product task's final state with what the sandbox says it should be."""
    from recovery.models import Attempt, Task
    from recovery.sandbox import site

    wrong = 0
    examples = []
    rows = Task.objects.filter(run_id=run_id).values_list(
        "pk", "url", "state", "last_error_class", "attempt_count"
    )
    for pk, url, state, error_class, attempts in rows:
        i = int(url.rstrip("/").rsplit("/", 1)[1])
        want = site.expected(i, seed=seed, profile=profile, bad_retailer=bad_retailer).final_state
        if state != want:
            wrong += 1
            if len(examples) < 10:
                # The evidence an operator needs: what each attempt ended as, in order.
                outcomes = list(
                    Attempt.objects.filter(task_id=pk)
                    .order_by("started_at")
                    .values_list("outcome", "error_class")
                )
                examples.append(
                    {
                        "product": i,
                        "url": url,
                        "state": state,
                        "expected": want,
                        "last_error_class": error_class,
                        "attempts": attempts,
                        "attempt_outcomes": [f"{o}:{e}" if e else o for o, e in outcomes],
                    }
                )
    return {"unexpected_final_states": wrong, "examples": examples}


def task_loss_property(
    finished: bool, intended: int, lost: int, tasks: dict[str, Any], sandbox: dict[str, Any]
) -> dict[str, Any]:
    """`no_intended_task_lost`: every task terminal, and each as the sandbox predicts.

    A page that ends other than predicted (a reset that ended `dead` after its worker was
    killed too often) is a lost page too: its data was there to collect. The examples go
    into the report, so `--json` says which pages and what their attempts ended as."""
    return {
        "ok": bool(finished) and lost == 0 and sandbox["unexpected_final_states"] == 0,
        "intended": intended,
        "lost": lost,
        "missing_task_keys": tasks["missing_task_keys"],
        "unfinished_tasks": tasks["unfinished_tasks"],
        "tasks_by_state": tasks["tasks_by_state"],
        "unexpected_final_states": sandbox["unexpected_final_states"],
        "unexpected_final_state_examples": sandbox["examples"],
    }


def retry_after_figures(run_id: int, seed: int) -> dict[str, Any]:
    """Pages answering 429 (Retry-After in seconds, and as an HTTP-date) end committed, and
    their next attempt waited for the Retry-After (2 s; the date form rounds to 2-3 s)."""
    from recovery.models import Attempt, Task
    from recovery.sandbox import site

    figures: dict[str, Any] = {}
    for kind in ("rate_limited", "rate_limited_date"):
        ids = [
            pk
            for pk, url in Task.objects.filter(run_id=run_id).values_list("pk", "url")
            if site.fault_for(int(url.rstrip("/").rsplit("/", 1)[1]), seed=seed, profile="mixed")
            == kind
        ]
        committed = Task.objects.filter(pk__in=ids, state="committed").count()
        waits = []
        for task_id in ids:
            attempts = list(
                Attempt.objects.filter(task_id=task_id).values_list(
                    "outcome", "error_class", "finished_at", "started_at"
                )
            )
            for outcome, error_class, finished, _started in attempts:
                if outcome != "retry" or error_class != "rate_limited" or finished is None:
                    continue
                # The next claim after this 429 was committed (an attempt that started
                # earlier ran concurrently under an expired lease: not a consequence).
                later = [s for _o, _e, _f, s in attempts if s and s >= finished]
                if later:
                    waits.append((min(later) - finished).total_seconds())
        figures[kind] = {
            "pages": len(ids),
            "committed": committed,
            "recorded_429s": len(waits),
            "min_wait_seconds": round(min(waits), 2) if waits else None,
        }
    figures["ok"] = all(
        f["pages"] > 0
        and f["committed"] == f["pages"]
        and f["recorded_429s"] > 0
        and f["min_wait_seconds"] >= 1.5
        for f in figures.values()
    )
    return figures
