"""The inner process: the drill's script, on the scratch database its environment names.

In: `DrillOptions` and the work directory. Out: the report (`main_inner` writes it as one JSON
line on stdout for the outer process): the harm done (crash windows, the fleet under kills and
a frozen worker), then every property and scenario checked in order. A check that raises is a
failed check with its reason; a property never checked is reported as not checked.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from recovery.showroom.drill.collection import (
    expected_final_states,
    retry_after_figures,
    task_loss_property,
    verify_tasks,
)
from recovery.showroom.drill.options import DATASET, WINDOW, DrillOptions, Echo
from recovery.showroom.drill.output import acceptance_properties
from recovery.showroom.drill.report import (
    PROPERTIES,
    guarded,
    missing_module,
    not_ok,
    report_ok,
)
from recovery.showroom.drill.runner import Drill
from recovery.showroom.drill.webhooks import webhook_scenario


def play(options: DrillOptions, workdir: Path, *, echo: Echo) -> dict[str, Any]:
    """The inner drill (runs with DATABASE_URL naming the scratch database)."""
    from django.core.management import call_command

    from recovery import keys
    from recovery.ops.progress import Progress

    started = time.monotonic()
    call_command("migrate", verbosity=0, interactive=False)
    drill = Drill(options, workdir, echo)
    props: dict[str, dict[str, Any]] = {}
    report: dict[str, Any] = {
        "tasks": options.tasks,
        "kills": 0,
        "lost": None,
        "duplicate_observations": None,
        "untraceable_attempts": None,
        "stale_writes_accepted": None,
        "seed": options.seed,
        "properties": props,
        "scenarios": {},
    }
    absent = missing_module("recovery.worker", "recovery.management.commands.work")
    with drill.supervisor:
        drill.start_sandbox()
        run_id = drill.run_id = drill.load(WINDOW, list(range(1, options.tasks + 1)))
        if absent:
            for name in PROPERTIES:
                props[name] = not_ok(f"no worker to drill: {absent}")
            return report
        expected_keys = {
            keys.task_key(DATASET, f"{drill.base_url}/product/{i}", WINDOW, "product")
            for i in range(1, options.tasks + 1)
        }
        echo(f"drill: run {run_id}, {options.tasks} tasks, sandbox at {drill.base_url}")

        # 1. Crash windows, one worker at a time on the fresh run.
        report["scenarios"]["crash_windows"] = drill.crash_windows()

        # 2. The fleet, with K random kills and one worker frozen past its leases.
        for _ in range(options.workers):
            drill.start_worker()
        with Progress("drill", total=options.tasks, unit="tasks") as progress:
            collect = drill.collect(run_id, options.kills, progress)
        collect["workers_exited_on_their_own"] = len(
            drill.figures.get("collect", {}).get("worker_exits", [])
        )
        report["scenarios"]["collect"] = collect
        report["scenarios"]["lease_expired_under_slow_worker"] = collect.pop("slow_worker")

        # 3. Verify the task-level properties.
        sandbox = expected_final_states(run_id, options.seed, "mixed", True)
        tasks = verify_tasks(run_id, expected_keys, sandbox)
        report.update(
            lost=tasks["missing_task_keys"] + tasks["unfinished_tasks"],
            duplicate_observations=tasks["duplicate_entities"] + tasks["duplicate_per_task"],
            untraceable_attempts=(
                tasks["untraceable_attempts"]
                + tasks["terminal_without_attempt"]
                + tasks["committed_without_committed_attempt"]
                + tasks["observations_without_source_attempt"]
            ),
            stale_writes_accepted=tasks["stale_writes_accepted"],
        )
        report["unexpected_final_states"] = sandbox["unexpected_final_states"]
        report["lost_lease_attempts"] = tasks["lost_lease_attempts"]
        report["crash_loops"] = tasks["crash_loops"]
        report["max_crash_count"] = tasks["max_crash_count"]
        props["no_intended_task_lost"] = task_loss_property(
            collect["finished"], len(expected_keys), report["lost"], tasks, sandbox
        )
        props["no_duplicate_logical_observation"] = {
            "ok": report["duplicate_observations"] == 0 and report["stale_writes_accepted"] == 0,
            "attempts": tasks["attempts"],
            "observations": tasks["observations"],
            "duplicate_entities": tasks["duplicate_entities"],
            "duplicate_per_task": tasks["duplicate_per_task"],
            "stale_writes_accepted": tasks["stale_writes_accepted"],
        }
        props["every_attempt_traceable"] = {
            "ok": report["untraceable_attempts"] == 0,
            "attempts": tasks["attempts"],
            "untraceable_attempts": tasks["untraceable_attempts"],
            "terminal_without_attempt": tasks["terminal_without_attempt"],
            "committed_without_committed_attempt": tasks["committed_without_committed_attempt"],
            "observations_without_source_attempt": tasks["observations_without_source_attempt"],
        }
        report["scenarios"]["retry_after_both_forms"] = guarded(
            retry_after_figures, run_id, options.seed
        )

        # 4. Acceptance, repair, delivery and the replacement dataset.
        acceptance_properties(drill, run_id, props, report["scenarios"])
        report["scenarios"]["webhook_twice_and_continue"] = guarded(webhook_scenario, drill)

    report["kills"] = drill.kills
    report["seconds"] = round(time.monotonic() - started, 1)
    for name in PROPERTIES:
        props.setdefault(name, not_ok("not checked"))
    report["ok"] = report_ok(report)
    return report


def main_inner(options: DrillOptions, workdir: Path, *, echo: Echo) -> int:
    report = play(options, workdir, echo=echo)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0
