"""Sitemap discovery against the sandbox over real sockets, in-process (SQLite and PostgreSQL).

The sandbox logs every path it serves (recovery.sandbox.robots), so "fetched once" is the
server's word. Sitemap files are claimed before pages (their priority), so a test can stop the
worker once discovery is done instead of fetching 50,000 pages.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Count
from django.test import Client
from django.urls import reverse

from recovery import worker
from recovery.fetch import sitemaps
from recovery.intake import manifests, schedule_runs, schedules, specs
from recovery.models import Attempt, Observation, Run, Schedule, Task
from recovery.quality import figures
from recovery.sandbox import robots as sandbox_robots
from recovery.sandbox import sitemaps as sandbox_sitemaps
from tests.support.direct import create_run, load_shop
from tests.support.world import make_users

pytestmark = pytest.mark.django_db(transaction=True)
WINDOW = "2026-11-29"
# The shop spec's 2 s deadline is for its slow pages; a 5 MB sitemap on a busy box needs more.
PATIENT = {"deadline": 30.0, "read_timeout": 15.0}


def requests_of(shop) -> Counter:
    return Counter(shop.served._runner.app[sandbox_robots.REQUESTS])


def sitemap_tasks(run):
    return Task.objects.filter(run=run, page_type=sitemaps.SITEMAP_PAGE_TYPE)


def discover(run) -> None:
    """Work until every sitemap file of the run is final (pages claimed meanwhile are done)."""
    stop = threading.Event()

    def discovery_done(_worker_id: str) -> bool:
        if not sitemap_tasks(run).exclude(state__in=["committed", "quarantined", "gone", "dead"]):
            stop.set()
        return False

    worker.run_forever("sitemap-test", stop=stop, batch_size=4, extra_steps=(discovery_done,))


def test_it_discovers_from_an_index_gzip_files_and_a_50000_url_file(make_sandbox, tmp_path):
    shop = make_sandbox(pages=30, faults="none")
    load_shop(
        "sm",
        sitemap={"url": shop.url("/sitemap_index.xml"), "page_type": "product"},
        provider_options=PATIENT,
    )
    # The manifest names one URL the sitemaps list too: one task, the manifest's.
    run = create_run("sm", [(shop.product_url(3), "product")], tmp_path, WINDOW)
    assert sitemap_tasks(run).count() == 1

    discover(run)

    files = {t.url.rsplit("/", 1)[1]: t for t in sitemap_tasks(run)}
    assert set(files) == {"sitemap_index.xml", "products-a.xml.gz", "products-b.xml", "big.xml"}
    assert {t.state for t in files.values()} == {"committed"}
    products = Task.objects.filter(run=run, page_type="product")
    # big.xml lists products 1..50,000; products-a and -b list 1..30 again (and overlap).
    assert products.count() == sandbox_sitemaps.BIG
    per_url = products.values("url").annotate(n=Count("id"))
    assert {row["n"] for row in per_url} == {1}
    assert products.get(url=shop.product_url(3)).discovery == "manifest"
    assert products.filter(discovery="sitemap").count() == sandbox_sitemaps.BIG - 1
    # Each file fetched once per attempt (a timeout's retry is an attempt), committed once.
    log = requests_of(shop)
    for name, task in files.items():
        attempts = Attempt.objects.filter(task=task)
        assert log[urlsplit(task.url).path] == attempts.count(), name
        assert attempts.filter(outcome="committed").count() == 1, name
    # The figure: every file read, and the URLs each committed file listed.
    first, second = sandbox_sitemaps.split(30)
    progress = figures.sitemap_progress(run.pk)
    assert progress == figures.SitemapProgress(
        files_read=4,
        files_known=4,
        urls_listed=len(first) + len(second) + sandbox_sitemaps.BIG,
        capped=False,
    )
    # ... and the run page shows it.
    client = Client()
    client.force_login(make_users()["operator"])
    page = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert f"4 of 4 sitemap files read, {progress.urls_listed} URLs listed" in page


def test_a_sitemap_run_collects_its_pages_and_reads_each_file_once(make_sandbox, tmp_path):
    shop = make_sandbox(pages=20, faults="none")
    url = shop.url("/sitemaps/products-a.xml.gz")
    load_shop("smrun", sitemap={"url": url, "page_type": "product"})
    result = manifests.create_run("smrun", WINDOW, None)
    assert "sitemap discovery from" in "\n".join(result.summary())

    worker.run_until_idle("sitemap-run", idle_wait=0.5)

    first, _second = sandbox_sitemaps.split(20)
    tasks = Task.objects.filter(run=result.run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    assert tasks.count() == len(first) + 1
    assert Observation.objects.filter(run=result.run).count() == len(first)
    assert requests_of(shop)["/sitemaps/products-a.xml.gz"] == 1


def test_lastmod_since_keeps_the_urls_modified_since(make_sandbox, tmp_path):
    shop = make_sandbox(pages=40, faults="none")
    load_shop(
        "smsince",
        sitemap={
            "url": shop.url("/sitemaps/products-b.xml"),
            "page_type": "product",
            "lastmod_since": "2026-11-01",
        },
    )
    run = manifests.create_run("smsince", WINDOW, None).run
    assert sitemap_tasks(run).get().navigation == {
        "sitemap": {"page_type": "product", "since": "2026-11-01T00:00:00+00:00"}
    }
    discover(run)
    _first, second = sandbox_sitemaps.split(40)
    expected = {
        shop.product_url(i)
        for i in second
        if sandbox_sitemaps.lastmod_for(i).isoformat() >= "2026-11-01"
    }
    assert 0 < len(expected) < len(second)
    found = set(Task.objects.filter(run=run, page_type="product").values_list("url", flat=True))
    assert found == expected
    note = Attempt.objects.get(task__in=sitemap_tasks(run), outcome="committed").artefact
    assert note["sitemap"]["skipped_lastmod"] == len(second) - len(expected)


def test_files_past_the_limits_or_malformed_are_quarantined_whole(make_sandbox):
    shop = make_sandbox(pages=20, faults="none")
    load_shop(
        "smfault", sitemap={"url": shop.url("/sitemaps/fault-index.xml"), "page_type": "product"}
    )
    run = manifests.create_run("smfault", WINDOW, None).run

    discover(run)

    files = {t.url.rsplit("/", 1)[1]: t for t in sitemap_tasks(run)}
    expected = {
        "fault-index.xml": ("committed", ""),
        "products-b.xml": ("committed", ""),
        "too-many.xml": ("quarantined", "too_large"),
        "bomb.xml.gz": ("quarantined", "too_large"),
        "encoded-bomb.xml": ("quarantined", "too_large"),
        "malformed.xml": ("quarantined", "sitemap_invalid"),
        "doctype.xml": ("quarantined", "sitemap_invalid"),
        "not-a-sitemap.xml": ("quarantined", "sitemap_invalid"),
    }
    assert {name: (t.state, t.last_error_class) for name, t in files.items()} == expected
    detail = {
        name: Attempt.objects.filter(task=t).latest("started_at").error_detail
        for name, t in files.items()
    }
    assert "more than 50,000 <url> entries" in detail["too-many.xml"]
    assert "once decompressed" in detail["bomb.xml.gz"]
    assert "52428800-byte cap" in detail["encoded-bomb.xml"]
    assert "malformed XML at line 5" in detail["malformed.xml"]
    assert "DOCTYPE" in detail["doctype.xml"]
    assert "root element is <html>" in detail["not-a-sitemap.xml"]
    # Nothing from a refused file became a task: only products-b's URLs.
    _first, second = sandbox_sitemaps.split(20)
    urls = set(Task.objects.filter(run=run, page_type="product").values_list("url", flat=True))
    assert urls == {shop.product_url(i) for i in second}


def test_robots_txt_applies_to_sitemap_files(make_sandbox):
    shop = make_sandbox(pages=20, faults="none", robots_txt="User-agent: *\nDisallow: /sitemaps/\n")
    load_shop("smrobots", sitemap={"url": shop.url("/sitemap_index.xml"), "page_type": "product"})
    run = manifests.create_run("smrobots", WINDOW, None).run
    discover(run)
    refused = sitemap_tasks(run).exclude(url__endswith="/sitemap_index.xml")
    assert refused.count() == 3
    assert set(refused.values_list("last_error_class", flat=True)) == {"robots_disallowed"}
    assert not [p for p in requests_of(shop) if p.startswith("/sitemaps/")]


def test_createrun_needs_a_manifest_only_without_a_sitemap(make_sandbox, tmp_path, capsys):
    shop = make_sandbox(pages=5, faults="none")
    load_shop("plain")
    with pytest.raises(CommandError, match="--manifest: required"):
        call_command("createrun", "plain", "--window", WINDOW)
    load_shop("smcli", sitemap={"url": shop.url("/sitemap_index.xml"), "page_type": "product"})
    call_command("createrun", "smcli", "--window", WINDOW)
    out = capsys.readouterr().out.strip().splitlines()
    run_id = int(out[-1])
    assert "1 task(s) added (no manifest)" in out[0]
    # --add with a manifest: the sitemap task is already there, never a second one.
    manifest = tmp_path / "m.txt"
    manifest.write_text(shop.product_url(1) + "\n")
    result = manifests.create_run("smcli", WINDOW, manifest, add=True)
    assert (result.tasks_added, result.already_present) == (1, 1)
    assert Task.objects.filter(run_id=run_id, page_type=sitemaps.SITEMAP_PAGE_TYPE).count() == 1


@pytest.mark.parametrize(
    ("sitemap", "message"),
    [
        ({"page_type": "product"}, "sitemap.url: required"),
        ({"url": "http://x.example/s.xml"}, "sitemap.page_type: required"),
        ({"url": "ftp://x.example/s.xml", "page_type": "product"}, "sitemap.url: .*scheme"),
        ({"url": "http://x.example/s.xml", "page_type": "nope"}, "'nope' is not a defined"),
        (
            {"url": "http://x.example/s.xml", "page_type": "product", "lastmod_since": "soon"},
            "sitemap.lastmod_since: 'soon' is not an ISO date",
        ),
        ({"url": "http://x.example/s.xml", "page_type": "product", "urls": 1}, "sitemap.urls"),
        ("http://x.example/s.xml", "sitemap: must be a table"),
    ],
)
def test_a_bad_sitemap_option_is_refused_naming_the_key(sitemap, message):
    with pytest.raises(specs.SpecError, match=message):
        load_shop("bad", sitemap=sitemap)


def test_sitemap_discovery_needs_the_direct_provider():
    with pytest.raises(specs.SpecError, match='needs provider = "direct"'):
        load_shop(
            "badprov",
            provider="noop",
            provider_options={},
            sitemap={"url": "http://x.example/s.xml", "page_type": "product"},
        )


def test_a_schedule_with_a_sitemap_source_starts_each_run_from_the_sitemap(make_sandbox):
    shop = make_sandbox(pages=20, faults="none")
    load_shop("smsched")  # no sitemap in the spec: the URLs take its default page type
    with pytest.raises(schedules.ScheduleError, match="manifest: 'sitemap:ftp"):
        schedules.check_source("sitemap:ftp://x.example/s.xml")
    created = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    with time_machine.travel(created, tick=False):
        schedule = schedules.add(
            "smsched",
            "nightly",
            recurrence=schedules.parse_recurrence(daily="06:00"),
            tz="UTC",
            window_format="%Y-%m-%d",
            source="sitemap:" + shop.url("/sitemaps/products-b.xml"),
            catch_up="latest",
            actor="test",
        )
    with time_machine.travel(created + timedelta(days=1), tick=False):
        assert schedule_runs.run_due() == 1
    run = Run.objects.get(dataset__name="smsched", window="2026-11-02")
    root = sitemap_tasks(run).get()
    assert root.url == shop.url("/sitemaps/products-b.xml")
    assert root.navigation == {"sitemap": {"page_type": "product"}}
    assert Task.objects.filter(run=run).count() == 1  # nothing else: the sitemap is the manifest

    discover(run)
    _first, second = sandbox_sitemaps.split(20)
    found = set(Task.objects.filter(run=run, page_type="product").values_list("url", flat=True))
    assert found == {shop.product_url(i) for i in second}

    # "previous" copies what the run discovered, not its sitemap file (no page of the spec).
    Schedule.objects.filter(pk=schedule.pk).update(manifest_source=schedules.PREVIOUS)
    with time_machine.travel(created + timedelta(days=2), tick=False):
        assert schedule_runs.run_due() == 1
    nxt = Run.objects.get(dataset__name="smsched", window="2026-11-03")
    assert set(Task.objects.filter(run=nxt).values_list("url", "page_type")) == {
        (url, "product") for url in found
    }


def test_an_admin_creates_a_sitemap_run_in_the_browser_without_a_manifest():
    load_shop("plainweb")
    load_shop("smweb", sitemap={"url": "http://shop.example/sitemap.xml", "page_type": "product"})
    client = Client()
    client.force_login(make_users()["admin"])
    refused = client.post("/datasets/plainweb/runs", {"window": WINDOW})
    assert refused.status_code == 400
    assert "--manifest: required (dataset &#x27;plainweb&#x27; has no sitemap" in (
        refused.content.decode()
    )
    assert not Run.objects.filter(dataset__name="plainweb").exists()
    made = client.post("/datasets/smweb/runs", {"window": WINDOW})
    assert made.status_code == 302
    run = Run.objects.get(dataset__name="smweb", window=WINDOW)
    assert made["Location"] == f"/runs/{run.pk}/"
    assert sitemap_tasks(run).get().url == "http://shop.example/sitemap.xml"
