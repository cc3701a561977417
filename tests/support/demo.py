"""A demo run at the point where its story waits for the admin's repair (showroom.demo_story)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from django.utils import timezone

from recovery import audit
from recovery.intake import specs
from recovery.models import Run, RunPartition
from recovery.sandbox import server, site
from recovery.showroom import demo_story
from recovery.states.choices import RunState
from tests.support.factories import make_run


def make_demo_candidate(data_dir: Path) -> Run:
    """The demo dataset at version 1, its run a candidate with the bad retailer quarantined,
    and version 2 written where `manage.py demo` writes it (under data_dir)."""
    spec = specs.validate(tomllib.loads(server.shop_spec_toml(name=demo_story.DATASET)))
    dataset, _ = specs.save_dataset(spec)
    run = make_run(
        dataset,
        window=demo_story.WINDOW,
        acceptance_state=RunState.CANDIDATE,
        candidate_at=timezone.now(),
    )
    bad = site.bad_retailer_for(0)
    RunPartition.objects.create(
        run=run, name=bad, quarantined=True, quarantine_reason="rule partition_invalid_prices"
    )
    audit.record("system", "run_candidate", run, "all tasks terminal", quarantined=[bad])
    path = data_dir / "demo" / "shop-v2.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(server.shop_spec_toml(name=demo_story.DATASET, version=2))
    return run
