"""A run broken by its selector on one retailer, for the page archive's tests.

`broken_run` (a fixture): the sandbox shop with its bad retailer's redesign, a run of spec
version 1 whose price selector fails there (selector_failure), every page archived under the
test's own artefact directory. `load(2)` loads the repaired spec; `requested(shop)` is the
sandbox's request log, counted by path.
"""

from __future__ import annotations

from collections import Counter

import pytest

from recovery import worker
from recovery.intake import specs
from recovery.models import Observation, Task
from recovery.sandbox import robots as sandbox_robots
from recovery.sandbox.site import bad_retailer_for
from tests.support.direct import create_run, shop_spec

PAGES = 30
# Version 1 reads the price as a direct child of div.product: the bad retailer's redesign
# moved it into div.price-box, so its pages fail the required field (selector_failure).
# Version 2 also reads the redesign's .price-now (the first match in document order).
V1_PRICE = "div.product > p.price"
V2_PRICE = "div.product > p.price, .price-now"


def load(version: int):
    spec = shop_spec("archived")
    product = spec["page_types"]["product"]
    product["fields"]["price"]["selector"] = V1_PRICE if version == 1 else V2_PRICE
    spec["scraper_version"] = str(version)
    dataset, _ = specs.save_dataset(specs.validate(spec))
    # The worker keeps a dataset's spec for two seconds per process (worker._DATASET_TTL):
    # this test loads version 2 sooner than that, as an operator never would.
    worker._datasets.clear()
    return dataset


def requested(shop) -> Counter:
    return Counter(shop.served._runner.app[sandbox_robots.REQUESTS])


def clear_log(shop) -> None:
    shop.served._runner.app[sandbox_robots.REQUESTS].clear()


def rows(run) -> dict[str, tuple[str, dict]]:
    return {o.entity_key: (o.payload_hash, o.payload) for o in Observation.objects.filter(run=run)}


@pytest.fixture
def broken_run(make_sandbox, tmp_path, settings):
    """A run of version 1 over the shop, the bad retailer's pages quarantined by its selector."""
    settings.SALVAGE_ARTEFACT_DIR = tmp_path / "artefacts"
    shop = make_sandbox(pages=PAGES, faults="bad_retailer")
    load(1)
    run = create_run(
        "archived", [(shop.product_url(i), "product") for i in range(1, PAGES + 1)], tmp_path
    )
    worker.run_until_idle("archive-first", idle_wait=2.0)
    bad = {
        shop.product_url(i)
        for i in range(1, PAGES + 1)
        if shop.expected(i).retailer == bad_retailer_for(shop.seed)
    }
    assert bad, "the seed must give the bad retailer some of the pages"
    states = dict(Task.objects.filter(run=run).values_list("url", "last_error_class"))
    assert {url for url, error in states.items() if error == "selector_failure"} == bad
    return shop, run, bad


def paths(urls) -> set[str]:
    return {"/" + url.split("/", 3)[3] for url in urls}
