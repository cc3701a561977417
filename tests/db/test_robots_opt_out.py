"""A robots.txt opt-out: who made it (audit), what it keeps (Crawl-delay), where it shows.

Against the sandbox over real sockets; its request log is the server's word on what was read.
"""

from __future__ import annotations

import asyncio
import getpass
import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from recovery.models import AuditEntry, Dataset
from recovery.outcomes import TaskInput
from recovery.providers.direct import DirectProvider
from recovery.sandbox import robots as sandbox_robots
from tests.support.direct import SHOP_SPEC, create_run, load_shop, shop_spec
from tests.support.world import make_user

REASON = "written permission from the shop's owner, ticket 42"
SLOW_RULES = "User-agent: *\nDisallow: /\nCrawl-delay: 0.25\n"


def requests_of(shop) -> list[str]:
    return list(shop.served._runner.app[sandbox_robots.REQUESTS])


def fetch_products(shop, spec: dict, pages=(1, 2, 3)):
    """The direct provider on the shop's product pages; (outcomes, the host's gate)."""
    inputs = [
        TaskInput(
            task_id=i,
            task_key=f"k{i}",
            run_id=1,
            url=shop.product_url(i),
            page_type="product",
            partition="p",
            window="w",
            dataset=spec["name"],
            attempt_count=1,
            lease_token=1,
            spec=spec,
        )
        for i in pages
    ]

    async def go():
        provider = DirectProvider(**spec["provider_options"])
        try:
            outcomes = await provider.execute_many(inputs)
            return outcomes, provider.fetcher.gate(shop.base_url.removeprefix("http://"))
        finally:
            await provider.aclose()

    return asyncio.run(go())


def test_opting_out_of_the_rules_keeps_the_sites_crawl_delay(make_sandbox):
    shop = make_sandbox(pages=3, faults="none", robots_txt=SLOW_RULES)
    spec = shop_spec("optout", robots={"obey": False, "reason": REASON})
    outcomes, gate = fetch_products(shop, spec)
    assert all(o.ok for o in outcomes)  # Disallow: / is not obeyed ...
    assert gate.min_delay == pytest.approx(0.25)  # ... but its Crawl-delay is
    assert requests_of(shop).count("/robots.txt") == 1


def test_crawl_delay_false_gives_up_the_delay_too_and_reads_no_robots_txt(make_sandbox):
    shop = make_sandbox(pages=3, faults="none", robots_txt=SLOW_RULES)
    robots = {"obey": False, "reason": REASON, "crawl_delay": False}
    outcomes, gate = fetch_products(shop, shop_spec("nodelay", robots=robots))
    assert all(o.ok for o in outcomes)
    assert gate.min_delay == 0
    assert "/robots.txt" not in requests_of(shop)


@pytest.mark.django_db
def test_loaddataset_audits_the_opt_out_as_the_operating_system_user(tmp_path):
    raw = json.loads(json.dumps(SHOP_SPEC))
    raw.update(name="cliout", robots={"obey": False, "reason": REASON})
    path = tmp_path / "cliout.json"
    path.write_text(json.dumps(raw))
    call_command("loaddataset", str(path), stdout=io.StringIO())
    dataset = Dataset.objects.get(name="cliout")
    entry = AuditEntry.objects.get(action="robots_opt_out", object_id=str(dataset.pk))
    assert entry.actor == f"cli:{getpass.getuser()}"
    assert entry.reason == REASON
    assert entry.detail == {"crawl_delay": "honoured"}
    created = AuditEntry.objects.get(action="dataset_created", object_id=str(dataset.pk))
    assert created.actor == entry.actor


@pytest.mark.django_db
def test_a_dashboard_upload_audits_the_opt_out_as_the_person(tmp_path):
    raw = json.loads(json.dumps(SHOP_SPEC))
    robots = {"obey": False, "reason": REASON, "crawl_delay": False}
    raw.update(name="webout", robots=robots)
    client = Client()
    client.force_login(make_user("adam", "admin"))
    upload = SimpleUploadedFile("webout.json", json.dumps(raw).encode())
    assert client.post("/datasets/upload", {"spec": upload}).status_code == 302
    dataset = Dataset.objects.get(name="webout")
    entry = AuditEntry.objects.get(action="robots_opt_out", object_id=str(dataset.pk))
    assert (entry.actor, entry.reason) == ("adam", REASON)
    assert entry.detail == {"crawl_delay": "ignored"}


@pytest.mark.django_db
def test_the_dataset_and_run_pages_say_the_dataset_ignores_robots_txt(tmp_path):
    load_shop("polite")
    load_shop("optout", robots={"obey": False, "reason": REASON})
    polite = create_run("polite", [("http://shop.example/product/1", "product")], tmp_path)
    rude = create_run("optout", [("http://shop.example/product/1", "product")], tmp_path)
    client = Client()
    client.force_login(make_user("olivia", "operator"))
    for dataset, run, shown in (("polite", polite, False), ("optout", rude, True)):
        pages = [
            reverse("dashboard:dataset", kwargs={"name": dataset}),
            reverse("dashboard:run", kwargs={"run_id": run.pk}),
        ]
        for url in pages:
            html = client.get(url).content.decode()
            assert ('class="badge tone-warn robots-opt-out"' in html) is shown, url
            assert ("ignores robots.txt<" in html) is shown, url
            if shown:
                assert "written permission from the shop&#x27;s owner" in html
