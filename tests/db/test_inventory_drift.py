"""Offset walks validate their final inventory (recovery.fetch.drift) against a listing that grows.

The sandbox inserts an item at the front of its listing every few offset requests, as a live
listing does; without the head re-read those items are never collected (the walk's offsets move
past them). The server's own state says how many appeared, so nothing here is hard-coded.
"""

from __future__ import annotations

import copy

import pytest
from django.db.models import Count
from django.test import Client
from django.urls import reverse

from recovery import worker
from recovery.models import Observation, Task
from recovery.quality import figures
from recovery.sandbox.site import product_for
from tests.support.direct import SHOP_SPEC, create_run, load_shop
from tests.support.world import make_users


def listing_with_total(total: dict | None) -> dict:
    page_types = copy.deepcopy(SHOP_SPEC["page_types"])
    if total is not None:
        page_types["listing"]["cursor"]["total"] = total
    return page_types


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("pages", "insert_every", "min_inserted"),
    [(60, 3, 2), (240, 2, 11)],  # the second grows by more than a page: a multi-page re-read
)
def test_a_listing_that_grows_while_walked_is_collected_whole_once(
    make_sandbox, tmp_path, monkeypatch, pages, insert_every, min_inserted
):
    shop = make_sandbox(
        pages=pages, faults="none", listing_limit=10, listing_insert_every=insert_every
    )
    name = f"drift{insert_every}"
    load_shop(
        name, page_types=listing_with_total({"selector": "div.listing", "attr": "data-total"})
    )
    run = create_run(name, [(shop.url("/listing?offset=0&limit=10"), "listing")], tmp_path)

    worker.run_until_idle("drift-test", idle_wait=1.0)

    inserted = shop.call(lambda: shop.shop.state.inserted)
    assert inserted >= min_inserted  # the listing really grew while it was walked
    visible = pages + inserted
    tasks = Task.objects.filter(run=run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    products = tasks.filter(page_type="product")
    seen = {int(u.rsplit("/", 1)[1]) for u in products.values_list("url", flat=True)}
    assert seen == set(range(1, visible + 1))  # every item, the new ones too
    per_url = products.values("url").annotate(n=Count("id"))
    assert {row["n"] for row in per_url} == {1}  # each once
    observed = Observation.objects.filter(run=run)
    assert observed.count() == visible
    assert set(observed.values_list("entity_key", flat=True)) == {
        product_for(i, pages=pages).sku for i in range(1, visible + 1)
    }
    # The walk itself never reaches items inserted at the front: the re-read found them all.
    drift = products.filter(discovery="drift")
    assert figures.inventory_drift(run.pk) == drift.count() > 0
    walk_seen = set(products.exclude(discovery="drift").values_list("url", flat=True))
    assert not walk_seen & set(drift.values_list("url", flat=True))
    assert len(walk_seen) + drift.count() == visible

    client = Client()
    client.force_login(make_users()["admin"])
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    n = drift.count()
    assert f"inventory drift: {n} items appeared during the walk" in html

    # Past the cap the figure reads cap + 1 ids, never a COUNT, and says "more than".
    monkeypatch.setattr(figures, "DRIFT_CAP", n - 1)
    assert figures.inventory_drift(run.pk) == n
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert f"inventory drift: more than {n - 1} items appeared during the walk" in html


@pytest.mark.django_db(transaction=True)
def test_without_a_total_the_head_is_read_once_and_a_still_listing_shows_no_drift(
    make_sandbox, tmp_path
):
    shop = make_sandbox(pages=30, faults="none", listing_limit=10)
    load_shop("nodrift", page_types=listing_with_total(None))
    run = create_run("nodrift", [(shop.url("/listing?offset=0&limit=10"), "listing")], tmp_path)
    worker.run_until_idle("nodrift-test", idle_wait=1.0)

    products = Task.objects.filter(run=run, page_type="product")
    assert products.count() == 30
    assert figures.inventory_drift(run.pk) == 0
    # Three walk pages, then one head re-read (offset 0 again: four offset requests).
    assert shop.call(lambda: shop.shop.state.offset_requests) == 4
    client = Client()
    client.force_login(make_users()["admin"])
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert "inventory drift" not in html
