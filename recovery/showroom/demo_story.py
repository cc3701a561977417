"""The demo's story as a checklist that ticks itself (seed 002's worked example, end to end).

`manage.py demo` collects a shop where one retailer's pages changed template: scraper version 1
reads the week's price change as the price, so that retailer's prices are invalid. The steps,
each read from the database (never from a flag the demo sets), so the page is true whoever
did the step and however (dashboard, command line or admin):

1. the run collects; 2. the bad retailer is flagged provisionally (recovery.quality.provisional);
3. the run becomes a candidate, the partition is quarantined and acceptance is refused;
4. an admin loads the repaired spec (version 2, the fixed price selector);
5. an admin creates a recovery batch for that partition's failed rows (the failed rule) with
   scraper version 2;
6. the batch completes and recovers it ("N of N recovered": reruns.recovered, defined in
   recovery.quality.figures);
7. the run passes its rules and an admin accepts it; 8. an admin publishes it;
9. the exporter downloads the dataset (the `export_download` audit entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from django.conf import settings

from recovery import audit
from recovery.intake import specs
from recovery.models import AuditEntry, RecoveryBatch, Run, RunPartition
from recovery.quality import reruns
from recovery.sandbox import site

DATASET = "demo-shop"
WINDOW = "demo"
REPAIRED_VERSION = "2"


class DemoStoryError(ValueError):
    """A demo action that cannot be done now (not in demo mode, too early)."""


@dataclass
class Step:
    key: str
    title: str
    done: bool
    at: datetime | None = None
    detail: str = ""
    link: str = ""  # a dashboard URL name: "run", "quarantine", "batch", "exports"
    link_arg: int | None = None
    who: str = ""  # the role that does this step
    href: str = ""  # filled in by the view


@dataclass
class Story:
    run: Run | None
    bad_partition: str
    steps: list[Step] = field(default_factory=list)
    can_load_repaired_spec: bool = False

    @property
    def done(self) -> int:
        return sum(step.done for step in self.steps)


def repaired_spec_path() -> Path:
    """Where `manage.py demo` writes the spec's version 2 (next to version 1)."""
    return Path(settings.DATA_DIR) / "demo" / "shop-v2.toml"


def demo_run() -> Run | None:
    return (
        Run.objects.select_related("dataset").filter(dataset__name=DATASET, window=WINDOW).first()
    )


def checklist() -> Story:
    """The demo's steps, each ticked from what the database says happened."""
    bad = site.bad_retailer_for(0)
    run = demo_run()
    story = Story(run=run, bad_partition=bad)
    if run is None:
        story.steps.append(Step("collect", "The demo run collects", False, who="demo"))
        return story
    partition = RunPartition.objects.filter(run=run, name=bad).first()
    decided = [
        e
        for e in AuditEntry.objects.filter(
            action="run_candidate", object_type="run", object_id=str(run.pk)
        ).order_by("at")
        if bad in (e.detail or {}).get("quarantined", [])
    ]
    spec_version = str((run.dataset.spec or {}).get("scraper_version", ""))
    batch = (
        RecoveryBatch.objects.filter(run=run, scraper_version=REPAIRED_VERSION)
        .order_by("created_at")
        .last()
    )
    batch = batch if batch and bad in batch.selection.get("touched_partitions", []) else None
    recovered, total = reruns.recovered(batch) if batch else (0, 0)
    download = (
        AuditEntry.objects.filter(
            action="export_download", object_type="run", object_id=str(run.pk)
        )
        .order_by("at")
        .first()
    )
    spec_loaded = AuditEntry.objects.filter(action="demo_load_repaired_spec").order_by("at").first()
    flagged = partition.provisional_at if partition else None

    story.steps = [
        Step(
            "collect",
            "The demo run collects the shop (five retailers, one of them redesigned its pages)",
            True,
            run.created_at,
            f"run #{run.pk} {run.dataset.name}@{run.window}",
            "run",
            run.pk,
            "operator",
        ),
        Step(
            "provisional",
            f"Retailer {bad} is flagged provisionally while the run collects",
            flagged is not None,
            flagged,
            (partition.provisional_reason if partition and flagged else "")
            or "watch the run page: a flag appears once 30 of its observations are read",
            "quarantine",
            run.pk,
            "operator",
        ),
        Step(
            "quarantined",
            f"Every task is done: the run is a candidate, {bad} is quarantined and "
            "acceptance is refused",
            bool(decided),
            decided[0].at if decided else None,
            "; ".join((decided[0].detail or {}).get("failures", [])) if decided else "",
            "quarantine",
            run.pk,
            "operator",
        ),
        Step(
            "repaired_spec",
            "An admin loads the spec's version 2 (the fixed price selector)",
            spec_version == REPAIRED_VERSION,
            spec_loaded.at if spec_loaded else None,
            f"dataset {run.dataset.name} is at scraper version {spec_version or '?'}",
            "demo",
            None,
            "admin",
        ),
        Step(
            "batch",
            f"An admin creates a recovery batch for {bad}'s failed rows (select the failed "
            f"rule) with scraper version {REPAIRED_VERSION}",
            batch is not None,
            batch.created_at if batch else None,
            f"batch #{batch.pk}: {batch.task_count} tasks" if batch else "",
            "batch" if batch else "quarantine",
            batch.pk if batch else run.pk,
            "admin",
        ),
        Step(
            "recovered",
            "The batch recovers the partition",
            bool(batch and batch.state == "completed" and total and recovered == total),
            batch.completed_at if batch else None,
            f"{recovered} of {total} recovered" if batch and batch.state == "completed" else "",
            "batch" if batch else "",
            batch.pk if batch else None,
            "admin",
        ),
        Step(
            "accepted",
            "The run passes its rules and an admin accepts it",
            run.accepted_at is not None,
            run.accepted_at,
            f"accepted by {run.accepted_by}" if run.accepted_by else "",
            "run",
            run.pk,
            "admin",
        ),
        Step(
            "published",
            "An admin publishes it",
            run.published_at is not None,
            run.published_at,
            "",
            "run",
            run.pk,
            "admin",
        ),
        Step(
            "exported",
            "The exporter downloads the dataset",
            download is not None,
            download.at if download else None,
            f"{download.actor} downloaded {(download.detail or {}).get('format', '')}"
            if download
            else "",
            "exports",
            None,
            "exporter",
        ),
    ]
    # The repaired spec is loaded after the candidate's decision: loaded earlier, the rest of
    # the collection would read the new template correctly and hide the story's failure.
    story.can_load_repaired_spec = bool(decided) and spec_version != REPAIRED_VERSION
    return story


def load_repaired_spec(actor: str) -> str:
    """Load the demo spec's version 2 (written by `manage.py demo`); returns the outcome."""
    story = checklist()
    if story.run is None:
        raise DemoStoryError("there is no demo run on this database")
    path = repaired_spec_path()
    if not path.exists():
        raise DemoStoryError(f"{path} does not exist: start the demo with manage.py demo")
    if not story.can_load_repaired_spec:
        raise DemoStoryError(
            "load the repaired spec once the run is a candidate and the partition is "
            "quarantined (or it is loaded already)"
        )
    dataset, outcome = specs.save_dataset(specs.validate(specs.parse_file(path)))
    audit.record(
        actor,
        "demo_load_repaired_spec",
        dataset,
        "the price selector repaired for the redesigned retailer",
        outcome=outcome,
        spec_sha256=dataset.spec_sha256,
    )
    return outcome
