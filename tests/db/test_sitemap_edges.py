"""Sitemaps at their edges, against the sandbox over real sockets (SQLite and PostgreSQL):
an index chain without end, an index wider than a run may read, `<loc>` values that repeat or
are unusable, a robots.txt's `Sitemap:` lines, and rules that give page types.

Each run here must end: the worker stops when every sitemap file is final, when more files
than the bounds allow exist (the test then fails instead of growing), or at a deadline.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from django.db.models import Count

from recovery import worker
from recovery.fetch import sitemaps
from recovery.intake import manifests
from recovery.models import Attempt, Task
from recovery.quality import figures
from recovery.sandbox import robots as sandbox_robots
from recovery.sandbox import sitemaps as sandbox_sitemaps
from tests.support.direct import load_shop

pytestmark = pytest.mark.django_db(transaction=True)
WINDOW = "2026-11-29"
FINAL = ("committed", "quarantined", "gone", "dead")


def requests_of(shop) -> Counter:
    return Counter(shop.served._runner.app[sandbox_robots.REQUESTS])


def sitemap_tasks(run):
    return Task.objects.filter(run=run, page_type=sitemaps.SITEMAP_PAGE_TYPE)


def discover(run, *, most_files: int, deadline: float = 120.0) -> None:
    """Work until every sitemap file of the run is final; stop (and fail) past `most_files`
    sitemap tasks or the deadline, so a tree without bounds fails the test, never hangs it."""
    stop = threading.Event()
    ends = time.monotonic() + deadline

    def watch(_worker_id: str) -> bool:
        files = sitemap_tasks(run)
        done = not files.exclude(state__in=FINAL).exists()
        if done or files.count() > most_files or time.monotonic() > ends:
            stop.set()
        return False

    worker.run_forever("sitemap-edges", stop=stop, batch_size=4, extra_steps=(watch,))
    assert sitemap_tasks(run).count() <= most_files, "the sitemap tree kept growing"
    assert not sitemap_tasks(run).exclude(state__in=FINAL).exists(), "discovery did not end"


def latest_detail(task: Task) -> str:
    return Attempt.objects.filter(task=task).latest("started_at").error_detail


def test_an_endless_chain_of_indexes_ends_with_the_file_at_the_depth_limit_quarantined(
    make_sandbox,
):
    shop = make_sandbox(pages=5, faults="none")
    load_shop("smdeep", sitemap={"url": shop.url("/sitemaps/deep/0.xml"), "page_type": "product"})
    run = manifests.create_run("smdeep", WINDOW, None).run

    discover(run, most_files=sitemaps.MAX_DEPTH + 3)

    files = {int(t.url.rsplit("/", 1)[1].removesuffix(".xml")): t for t in sitemap_tasks(run)}
    assert sorted(files) == list(range(sitemaps.MAX_DEPTH + 1))
    for depth in range(sitemaps.MAX_DEPTH):
        assert files[depth].state == "committed", depth
    last = files[sitemaps.MAX_DEPTH]
    assert (last.state, last.last_error_class) == ("quarantined", "too_large")
    detail = latest_detail(last)
    assert f"nested {sitemaps.MAX_DEPTH} levels" in detail
    assert f"MAX_DEPTH = {sitemaps.MAX_DEPTH}" in detail
    # The sandbox was never asked for the file past the limit.
    assert requests_of(shop)[f"/sitemaps/deep/{sitemaps.MAX_DEPTH + 1}.xml"] == 0
    assert not Task.objects.filter(run=run).exclude(state__in=FINAL).exists()


def test_an_index_listing_more_sitemaps_than_a_run_may_read_is_refused_whole(make_sandbox):
    shop = make_sandbox(pages=5, faults="none")
    load_shop("smwide", sitemap={"url": shop.url("/sitemaps/wide.xml"), "page_type": "product"})
    run = manifests.create_run("smwide", WINDOW, None).run

    discover(run, most_files=1)

    wide = sitemap_tasks(run).get()
    assert (wide.state, wide.last_error_class) == ("quarantined", "too_large")
    detail = latest_detail(wide)
    assert f"lists {sandbox_sitemaps.WIDE:,} sitemaps" in detail
    assert f"limit of {sitemaps.MAX_FILES:,} sitemap files (MAX_FILES)" in detail
    assert Task.objects.filter(run=run).count() == 1  # nothing from it was added


def test_unusable_and_repeated_locs_are_skipped_and_counted_not_made_tasks(make_sandbox):
    shop = make_sandbox(pages=5, faults="none")
    url = shop.url("/sitemaps/edges.xml")
    load_shop("smedges", sitemap={"url": url, "page_type": "product"})
    run = manifests.create_run("smedges", WINDOW, None).run

    discover(run, most_files=1)

    pages = Task.objects.filter(run=run).exclude(page_type=sitemaps.SITEMAP_PAGE_TYPE)
    # `<loc>http://</loc>` joined onto the file's URL made a page task for the file itself.
    assert not pages.filter(url=url).exists()
    assert set(pages.values_list("url", flat=True)) == {
        shop.product_url(i) for i in sandbox_sitemaps.EDGE_PRODUCTS
    }
    assert {row["n"] for row in pages.values("url").annotate(n=Count("id"))} == {1}
    note = Attempt.objects.get(task__in=sitemap_tasks(run), outcome="committed").artefact
    counts = note["sitemap"]
    assert (counts["urls"], counts["repeats"], counts["unusable"]) == (3, 3, 4)
    # "URLs listed" counts each URL once, however often the file repeats it.
    assert figures.sitemap_progress(run.pk).urls_listed == len(sandbox_sitemaps.EDGE_PRODUCTS)


def test_a_robots_txt_as_the_sitemap_url_reads_every_sitemap_it_lists(make_sandbox):
    robots_txt = (
        "User-agent: *\nDisallow: /private/\n"
        "Sitemap: {origin}/sitemaps/products-a.xml.gz\n"
        "Sitemap: {origin}/sitemaps/products-b.xml\n"
    )
    shop = make_sandbox(pages=20, faults="none", robots_txt=robots_txt)
    load_shop("smrobotstxt", sitemap={"url": shop.url("/robots.txt"), "page_type": "product"})
    run = manifests.create_run("smrobotstxt", WINDOW, None).run

    discover(run, most_files=3)

    files = {t.url.rsplit("/", 1)[1]: t.state for t in sitemap_tasks(run)}
    assert files == {
        "robots.txt": "committed",
        "products-a.xml.gz": "committed",
        "products-b.xml": "committed",
    }
    first, second = sandbox_sitemaps.split(20)
    urls = set(Task.objects.filter(run=run, page_type="product").values_list("url", flat=True))
    assert urls == {shop.product_url(i) for i in [*first, *second]}
    root = sitemap_tasks(run).get(url=shop.url("/robots.txt"))
    note = Attempt.objects.get(task=root, outcome="committed").artefact["sitemap"]
    assert (note["sitemaps"], note["robots_txt"]) == (2, 1)


def test_a_robots_txt_without_sitemap_lines_is_a_clear_failure(make_sandbox):
    shop = make_sandbox(pages=5, faults="none")
    load_shop("smnolines", sitemap={"url": shop.url("/robots.txt"), "page_type": "product"})
    run = manifests.create_run("smnolines", WINDOW, None).run
    discover(run, most_files=1)
    root = sitemap_tasks(run).get()
    assert (root.state, root.last_error_class) == ("quarantined", "sitemap_invalid")
    assert "lists no Sitemap: line" in latest_detail(root)


def test_sitemap_rules_give_each_url_its_page_type(make_sandbox):
    shop = make_sandbox(pages=12, faults="none")
    _first, second = sandbox_sitemaps.split(12)  # products 2..12
    load_shop(
        "smrules",
        sitemap={
            "url": shop.url("/sitemaps/products-b.xml"),
            # No default page type: a URL no rule matches is skipped and counted.
            "rules": [
                {"pattern": r"/product/12$", "page_type": "category"},  # first match wins
                {"pattern": r"/product/1[0-9]$", "page_type": "listing"},
                {"pattern": r"/product/[2-8]$", "page_type": "product"},
            ],
        },
    )
    run = manifests.create_run("smrules", WINDOW, None).run
    assert [r["page_type"] for r in sitemap_tasks(run).get().navigation["sitemap"]["rules"]] == [
        "category",
        "listing",
        "product",
    ]

    discover(run, most_files=1)

    made = dict(
        Task.objects.filter(run=run)
        .exclude(page_type=sitemaps.SITEMAP_PAGE_TYPE)
        .values_list("url", "page_type")
    )
    expected = {shop.product_url(i): "product" for i in second if i <= 8}
    expected.update({shop.product_url(10): "listing", shop.product_url(11): "listing"})
    expected[shop.product_url(12)] = "category"
    assert made == expected
    note = Attempt.objects.get(task__in=sitemap_tasks(run), outcome="committed").artefact
    assert note["sitemap"]["unmatched"] == 1  # product 9
