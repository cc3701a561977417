"""The one provider interface between the engine and whatever fetches pages.

The engine claims tasks, hands them to `Provider.execute_many` (which runs them concurrently)
and commits each `Outcome` under the task's own lease token. A provider never touches the
database for task state; it only reports what happened.
"""

from __future__ import annotations

from typing import Protocol

from recovery.outcomes import Outcome, TaskInput


class Provider(Protocol):
    name: str

    async def execute_many(self, tasks: list[TaskInput]) -> list[Outcome]:
        """Run the tasks concurrently; one Outcome per task, in the same order."""
        ...

    async def aclose(self) -> None: ...
