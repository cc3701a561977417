"""What a data consumer reads about datasets and runs, for the API and the exporter's home.

A run object: its id, dataset, window, state, accepted and published times, exported rows,
scraper and schema versions, the partial-result marks and the formats. A dataset object: its
name, description, version (the change feed's, recovery.consumers.feed) and current run (the
newest accepted or published one, exports.current_run; guarantee 9: never a run in progress).

Rows pages walk one run's exported rows by observation id. The cursor names its run
(`<run>:<observation id>`), so a consumer paging through a dataset keeps reading the run it
started on even when a newer run replaces it meanwhile; the rows are JSONL's objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from recovery.consumers import feed
from recovery.delivery import exports, partial
from recovery.models import Dataset, Run
from recovery.states import row_states
from recovery.states.run import AVAILABLE

MAX_PAGE = 5000
_CURSOR = re.compile(r"^([0-9]{1,18}):([0-9]{1,18})$")


class CatalogueError(ValueError):
    """A read that cannot be answered as asked (a malformed cursor, a run of another dataset,
    a run that is not exported)."""


def exported_rows(run: Run) -> int:
    """How many rows the run's export holds: valid and not held."""
    return row_states.state_counts(run.pk).get(row_states.VALID, 0)


def run_object(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "dataset": run.dataset.name,
        "window": run.window,
        "state": run.acceptance_state,
        "accepted_at": run.accepted_at.isoformat() if run.accepted_at else None,
        "published_at": run.published_at.isoformat() if run.published_at else None,
        "rows": exported_rows(run),
        "scraper_version": run.scraper_version,
        "schema_version": run.schema_version,
        **partial.marks(run).as_dict(),
        "formats": list(exports.FORMATS),
    }


def dataset_object(dataset: Dataset) -> dict[str, Any]:
    current = exports.current_run(dataset.name)
    return {
        "name": dataset.name,
        "description": str((dataset.spec or {}).get("description", "")),
        "version": feed.version(dataset),
        "current_run": run_object(current) if current is not None else None,
    }


def runs(dataset: Dataset, *, before: int | None, limit: int) -> tuple[list[Run], int | None]:
    """The dataset's accepted and published runs, newest (highest id) first, a page at a time:
    those with an id below `before`; the second value is the next page's `before`."""
    found = Run.objects.filter(dataset=dataset, acceptance_state__in=AVAILABLE).select_related(
        "dataset"
    )
    if before is not None:
        found = found.filter(pk__lt=before)
    page = list(found.order_by("-pk")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return page, (page[-1].pk if more and page else None)


def exported_run(dataset: Dataset, run_id: int) -> Run:
    """The dataset's accepted or published run `run_id`, or CatalogueError."""
    run = Run.objects.select_related("dataset").filter(pk=run_id, dataset=dataset).first()
    if run is None or run.acceptance_state not in AVAILABLE:
        raise CatalogueError(f"dataset {dataset.name} has no accepted run {run_id}")
    return run


@dataclass(frozen=True)
class RowsPage:
    run: Run
    rows: list[dict[str, Any]]
    next: str | None  # the cursor of the next page; None: the run's last row was read


def rows_page(
    dataset: Dataset, *, after: str | None, run_id: int | None, limit: int
) -> RowsPage | None:
    """A page of one run's rows: the run the cursor `after` names (from after its row), else
    `run_id`, else the dataset's current run (None when it has none)."""
    start = 0
    if after:
        match = _CURSOR.match(after)
        if not match:
            raise CatalogueError(f"after: {after!r} is not a cursor this API gave (<run>:<row>)")
        run_id, start = int(match.group(1)), int(match.group(2))
    if run_id is not None:
        run = exported_run(dataset, run_id)
    else:
        current = exports.current_run(dataset.name)
        if current is None:
            return None
        run = current
    found = exports.row_objects(run, after=start, limit=limit + 1)
    more = len(found) > limit
    found = found[:limit]
    cursor = f"{run.pk}:{found[-1][0]}" if more and found else None
    return RowsPage(run, [row for _, row in found], cursor)


def readable(datasets: QuerySet[Dataset]) -> list[dict[str, Any]]:
    """The dataset objects of `datasets`, by name."""
    return [dataset_object(dataset) for dataset in datasets.order_by("name")]
