"""Fault switches shared by the provider simulators (messora, tornado, webscraper)."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any


class FaultSwitches:
    """`faults` maps a fault name to how many more times it fires (-1: always, 0: never)."""

    def __init__(self, **options: Any) -> None:
        self.faults: dict[str, int] = dict(options.get("faults") or {})
        # The form the next 429 carries; tests may set it to choose the first one.
        self.next_retry_after = "seconds"

    def fire(self, name: str) -> bool:
        left = self.faults.get(name, 0)
        if left == 0:
            return False
        if left > 0:
            self.faults[name] = left - 1
        return True

    def retry_after(self) -> str:
        """Alternate both RFC 9110 forms: "1" (seconds) and an HTTP-date 3 s ahead (a date in
        the future, so a client that ignored the date form would be caught retrying early)."""
        form, self.next_retry_after = (
            self.next_retry_after,
            "date" if self.next_retry_after == "seconds" else "seconds",
        )
        return formatdate(time.time() + 3, usegmt=True) if form == "date" else "1"
