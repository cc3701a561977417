"""Seed 002's "match the checkpoint to discovery", with a worker SIGKILLed mid-run and resumed.

For each discovery mode a `manage.py work` process is killed by recovery.faults at a commit
point after a few batches; a second process finishes the run. Then: no page lost, no
observation duplicated, no child task duplicated, and (cursor) the chain resumed from the page
the last accepted commit stored, without fetching any accepted page again.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from django.db.models import Count

from recovery.models import Attempt, Observation, Task
from recovery.sandbox.site import CATEGORIES, product_for, sku_for
from tests.support.direct import create_run, load_shop
from tests.support.engine_procs import Procs, all_terminal, log_text, wait_exit

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

BATCH = "5"


@pytest.fixture
def procs(tmp_path):
    children = Procs(tmp_path)
    yield children
    children.close()


def interrupt_and_resume(procs, run, point: str, skip: int) -> dict[str, int]:
    """Kill a worker at `point` after `skip` passes, then finish with another worker.
    Returns the task states the kill left behind."""
    victim = procs.manage(
        "victim",
        "work",
        "--until-idle",
        "--batch",
        BATCH,
        "--concurrency",
        "4",
        "--worker-id",
        "victim",
        SALVAGE_FAULT_POINT=point,
        SALVAGE_FAULT_SKIP=str(skip),
    )
    assert wait_exit(victim, 120, "the victim") == -signal.SIGKILL, log_text(victim)[-3000:]
    left = dict(Counter(Task.objects.filter(run=run).values_list("state", flat=True)))
    assert left.get("committed", 0) > 0 and not all_terminal(run.pk), left  # killed mid-run
    rescuer = procs.manage(
        "rescuer", "work", "--until-idle", "--batch", BATCH, "--worker-id", "rescuer"
    )
    assert wait_exit(rescuer, 180, "the rescuer") == 0, log_text(rescuer)[-3000:]
    assert all_terminal(run.pk)
    return left


def assert_no_duplicates(run, n_products: int) -> None:
    tasks = Task.objects.filter(run=run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    # No child task duplicated: one task per (URL, page type); the task key guarantees it, the
    # count proves the discovery was not repeated under another spelling.
    per_url = tasks.values("url", "page_type").annotate(n=Count("id"))
    assert {row["n"] for row in per_url} == {1}
    products = tasks.filter(page_type="product")
    assert products.count() == n_products
    # No observation duplicated, none lost: one per product entity.
    observations = Observation.objects.filter(run=run)
    assert observations.count() == n_products
    assert set(observations.values_list("entity_key", flat=True)) == {
        sku_for(int(url.rsplit("/", 1)[1])) for url in products.values_list("url", flat=True)
    }
    # Every task committed exactly once (a killed batch left lost_lease attempts, no commits).
    committed = Counter(
        Attempt.objects.filter(run=run, outcome="committed").values_list("task_id", flat=True)
    )
    assert len(committed) == tasks.count() and set(committed.values()) == {1}


def test_fixed_inventory_resumes_the_unfinished_keys(make_sandbox, procs, tmp_path):
    shop = make_sandbox(pages=40, faults="none")
    load_shop("fixed")
    run = create_run("fixed", [(shop.product_url(i), "product") for i in range(1, 41)], tmp_path)
    left = interrupt_and_resume(procs, run, "in_commit", skip=2)
    assert left["committed"] == 10  # two batches survived; the third rolled back
    assert_no_duplicates(run, 40)


def test_cursor_pagination_resumes_from_the_last_accepted_page(make_sandbox, procs, tmp_path):
    shop = make_sandbox(pages=60, faults="none", listing_limit=10)
    load_shop("cursor")
    run = create_run("cursor", [(shop.url("/listing"), "listing")], tmp_path)
    interrupt_and_resume(procs, run, "after_commit", skip=2)

    assert_no_duplicates(run, 60)
    listing = Task.objects.filter(run=run, page_type="listing").order_by("id")
    pages = [t.navigation.get("page", 1) for t in listing]
    assert pages == [1, 2, 3, 4, 5, 6]  # the whole chain, no page missing or repeated
    for task in listing[1:]:
        assert task.discovery == "cursor"
        assert task.navigation["cursor"] == task.url  # stored with the page that found it
    # The cursor resumed where the last accepted page left it: each listing page was fetched
    # once in total; the victim's accepted pages are a prefix, the rescuer took the rest.
    fetchers = []
    for task in listing:
        attempts = Attempt.objects.filter(task=task).exclude(outcome="lost_lease")
        assert attempts.count() == 1, task.url
        fetchers.append(attempts.get().worker)
    assert "victim" in fetchers and "rescuer" in fetchers
    assert fetchers == sorted(fetchers, key=lambda w: w != "victim")
    # The chain's products: everything in the shop, each at link depth 1.
    assert {t.url for t in Task.objects.filter(run=run, page_type="product")} == {
        shop.product_url(i) for i in range(1, 61)
    }


def test_link_discovery_persists_children_with_the_parent(make_sandbox, procs, tmp_path):
    shop = make_sandbox(pages=50, faults="none")
    load_shop("links")
    run = create_run("links", [(shop.url("/categories"), "categories")], tmp_path)
    interrupt_and_resume(procs, run, "after_fetch", skip=2)

    in_categories = {i for i in range(1, 51) if product_for(i, pages=50).category in CATEGORIES}
    assert_no_duplicates(run, len(in_categories))
    categories = Task.objects.filter(run=run, page_type="category")
    non_empty = {product_for(i, pages=50).category for i in in_categories}
    assert {t.url.rsplit("/", 1)[1] for t in categories} == set(CATEGORIES)
    assert len(non_empty) >= 5
    products = Task.objects.filter(run=run, page_type="product")
    assert {t.depth for t in products} == {2} and {t.discovery for t in products} == {"link"}
    assert all(t.parent_id in {c.pk for c in categories} for t in products)


def test_offset_pagination_is_navigation_only(make_sandbox, procs, tmp_path):
    # The listing shifts while we walk it (an item is inserted at the front every 3 offset
    # requests), as real listings do: items repeat across pages, but each entity is one task
    # and one observation, and the final inventory holds every original product.
    shop = make_sandbox(pages=50, faults="none", listing_limit=10, listing_insert_every=3)
    load_shop("offset")
    run = create_run("offset", [(shop.url("/listing?offset=0&limit=10"), "listing")], tmp_path)
    interrupt_and_resume(procs, run, "after_commit", skip=2)

    inserted = shop.call(lambda: shop.shop.state.inserted)
    assert inserted > 0  # the listing really shifted during the run
    products = Task.objects.filter(run=run, page_type="product")
    assert_no_duplicates(run, products.count())
    seen = {int(url.rsplit("/", 1)[1]) for url in products.values_list("url", flat=True)}
    assert set(range(1, 51)) <= seen  # the final inventory: no original product lost
    listing = Task.objects.filter(run=run, page_type="listing").exclude(navigation={})
    assert {t.discovery for t in listing} == {"offset"}
    offsets = sorted(t.navigation["offset"] for t in listing)
    assert offsets == list(range(10, 10 * (len(offsets) + 1), 10))
