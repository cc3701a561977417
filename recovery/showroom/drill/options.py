"""What a drill is asked to do, and the names of what it creates.

In: the command's options (`manage.py drill --tasks ... --kills ...`). Out: `DrillOptions`, read
by the outer process (the scratch database, the child environment) and the inner one (the
sandbox, the workers, the harm); and the names the drill gives its datasets, windows and actor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DATASET = "drill-shop"
WINDOW = "drill-1"
REPLACEMENT_WINDOW = "drill-2"
ACTOR = "drill"
CLOUD_TOKEN = "sandbox-webscraper-token"  # the simulator's own account token


@dataclass
class DrillOptions:
    tasks: int = 2000
    kills: int = 10
    seed: int = 0
    workers: int = 3
    concurrency: int = 8
    lease_seconds: int = 4
    timeout: float = 900.0
    keep: bool = False  # keep the scratch directory (logs) for a post-mortem
    # PostgreSQL only: every this many seconds of the collection, the scratch database refuses
    # connections and loses every worker's backend for db_outage_seconds (what a restart does
    # to its clients); 0 = never. The workers must ride it out (recovery.ops.outage).
    db_outage_every: float = 0.0
    db_outage_seconds: float = 5.0


Echo = Callable[[str], None]


def options_from(values: dict[str, Any]) -> DrillOptions:
    known = {k: v for k, v in values.items() if k in DrillOptions.__dataclass_fields__}
    return DrillOptions(**{k: v for k, v in known.items() if v is not None})
