"""The drill's report: what it must hold, and whether it did.

In: the report the inner process builds (one dict: figures, `properties`, `scenarios`). Out:
`report_ok` (every property holds and every harm was really done), `format_report` (the text
`manage.py drill` prints; `--json` prints the dict itself), and the pieces the checks report
with: `not_ok` (a failed check with its reason), `guarded` (an exception as a failed check),
`missing_module` (a check whose machinery is not installed fails, never passes unchecked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PROPERTIES = (
    "no_intended_task_lost",
    "no_duplicate_logical_observation",
    "every_attempt_traceable",
    "quarantined_output_not_published",
    "repaired_partition_leaves_accepted_unchanged",
    "delivery_repeats_without_collection",
    "previous_dataset_available_until_replacement_passes",
)
# Harms of the drill that are reported beside the seven properties.
SCENARIOS = (
    "crash_windows",
    "lease_expired_under_slow_worker",
    "retry_after_both_forms",
    "uncertain_destination_write",
    "webhook_twice_and_continue",
)


def report_ok(report: dict[str, Any]) -> bool:
    """Every property holds, and every harm was really done (a drill that could not kill or
    freeze a worker proved nothing about surviving it)."""
    properties = all(report["properties"].get(name, {}).get("ok") is True for name in PROPERTIES)
    harms = all(report.get("scenarios", {}).get(name, {}).get("ok") is True for name in SCENARIOS)
    return properties and harms


def not_ok(reason: str, **figures: Any) -> dict[str, Any]:
    return {"ok": False, "reason": reason, **figures}


def guarded(check: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one check; an exception is a failed check with its reason, not a lost report."""
    try:
        return check(*args)
    except Exception as exc:
        return not_ok(f"{type(exc).__name__}: {exc}"[:500])


def missing_module(*names: str) -> str | None:
    import importlib.util

    for name in names:
        if importlib.util.find_spec(name) is None:
            return f"{name} has not landed yet"
    return None


def format_report(report: dict) -> str:
    lines = [
        f"drill: {report['tasks']} tasks, {report['kills']} kills, "
        f"{report.get('seconds', '?')} s on {report.get('database', '?')}",
        f"  lost {report['lost']}, duplicate observations {report['duplicate_observations']}, "
        f"untraceable attempts {report['untraceable_attempts']}, "
        f"stale writes accepted {report['stale_writes_accepted']}, "
        f"unexpected final states {report.get('unexpected_final_states', '?')}",
    ]
    for name, figures in report["properties"].items():
        mark = "ok  " if figures.get("ok") else "FAIL"
        detail = ", ".join(f"{k}={v}" for k, v in figures.items() if k != "ok")
        lines.append(f"  {mark} {name}: {detail}")
    for name, figures in report.get("scenarios", {}).items():
        if isinstance(figures, dict) and "ok" in figures:
            mark = "ok  " if figures.get("ok") else "FAIL"
            lines.append(f"  {mark} scenario {name}")
    return "\n".join(lines)
