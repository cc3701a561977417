"""A test provider whose speed each worker process sets from its environment.

SLOW_PROVIDER_SLEEP=<seconds> makes execute_many sleep first (a slow page);
SLOW_PROVIDER_GATE=<path> makes it wait until that file exists (the test decides when the
"page" arrives). The payload records the worker's pid, so a test can tell whose write landed.
Imported by the child processes of the stale-worker test (the registry is per process).
"""

from __future__ import annotations

import asyncio
import os

from recovery.outcomes import Observed, Outcome, TaskInput
from recovery.providers.registry import register


@register("slow_test")
class SlowProvider:
    name = "slow_test"

    def __init__(self, **options) -> None:
        self.sleep = float(os.environ.get("SLOW_PROVIDER_SLEEP", "0"))
        self.gate = os.environ.get("SLOW_PROVIDER_GATE", "")

    async def execute_many(self, tasks: list[TaskInput]) -> list[Outcome]:
        if self.sleep:
            await asyncio.sleep(self.sleep)
        while self.gate and not os.path.exists(self.gate):
            await asyncio.sleep(0.05)
        return [
            Outcome(
                http_status=200,
                observations=[Observed(entity_key=t.url, payload={"pid": os.getpid()})],
            )
            for t in tasks
        ]

    async def aclose(self) -> None:
        return None
