"""Partial results travel with the data: what says a run's data is known to be incomplete.

A provider job can stop early (a search job's `token_cap`: `RemoteJob.stopped_reason`), and the
import then writes why coverage is incomplete on the run (`Run.coverage_note`). Both are facts
about the whole run, not about a row: the rows present are fine, others are missing. So they
travel as run-level values wherever the data goes: the export's provenance columns (the same
value on every row, like `window`), the Parquet file's metadata, the accepted and published
outbox events' payload and the API's run objects. Empty strings when the run is complete.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from recovery.models import RemoteJob, Run


@dataclass(frozen=True, slots=True)
class Marks:
    stopped_reason: str  # the distinct reasons the run's provider jobs stopped early, sorted
    coverage_note: str  # Run.coverage_note: one line per job that stopped early

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def marks(run: Run) -> Marks:
    """The run's partial-result marks (one indexed read of its remote jobs)."""
    reasons = (
        RemoteJob.objects.filter(run_id=run.pk)
        .exclude(stopped_reason="")
        .values_list("stopped_reason", flat=True)
        .distinct()
    )
    return Marks(", ".join(sorted(set(reasons))), run.coverage_note or "")
