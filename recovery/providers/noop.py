"""A provider that fetches nothing: one observation per task, instantly.

Used by the claim/commit benchmark and engine tests, so that they measure the engine alone.
"""

from __future__ import annotations

from recovery.outcomes import Observed, Outcome, TaskInput
from recovery.providers.registry import register


@register("noop")
class NoopProvider:
    name = "noop"

    def __init__(self, **options) -> None:
        self.options = options

    async def execute_many(self, tasks: list[TaskInput]) -> list[Outcome]:
        return [
            Outcome(
                http_status=200,
                observations=[Observed(entity_key=t.url, payload={"url": t.url, "n": t.task_id})],
            )
            for t in tasks
        ]

    async def aclose(self) -> None:
        return None
