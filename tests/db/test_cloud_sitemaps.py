"""Web Scraper Cloud sitemaps (seed 002: "Build and validate the sitemap first"; "one-time custom
start URLs can narrow a Cloud launch"), against the simulator over real sockets: the spec names
the sitemap file, `manage.py cloudsitemap` validates it here and creates, updates or leaves it
in the account; a recovery batch launches with exactly its URLs and never changes the sitemap."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from django.core.management import CommandError, call_command

from recovery import remote
from recovery.models import AuditEntry, Dataset, Incident, RemoteJob, Task
from recovery.quality import reruns
from recovery.sandbox import webscraper as sim
from tests.support.factories import make_run, make_tasks
from tests.support.remote import scan_database_for, serve, stats, wait_for

TOKEN = "sandbox-webscraper-token"

pytestmark = pytest.mark.django_db

SITEMAP = {
    "_id": "shop-products",
    "startUrl": ["http://shop.test/"],
    "selectors": [
        {
            "id": "product",
            "type": "SelectorLink",
            "parentSelectors": ["_root"],
            "selector": "a.product-link",
            "multiple": True,
        },
        {
            "id": "title",
            "type": "SelectorText",
            "parentSelectors": ["product"],
            "selector": "h1",
            "multiple": False,
        },
    ],
}


def spec_text(sitemap_file: str | None, *, sitemap_id: int | None = None, extra: str = "") -> str:
    options = "poll_interval = 0\nrequest_timeout = 2\n"
    if sitemap_file is not None:
        options += f'sitemap_file = "{sitemap_file}"\n'
    if sitemap_id is not None:
        options += f"sitemap_id = {sitemap_id}\n"
    return f"""name = "cloud-shop"
provider = "webscraper"

[entity_key]
from = "url"

[partition]
rule = "host"

[provider_options]
{options}{extra}
[page_types.product.fields]
title = {{ selector = "h1", required = true }}
"""


@pytest.fixture
def cloud(settings, tmp_path):
    served, state = serve(sim, run_seconds=0.05)
    settings.WEBSCRAPER_API_URL = served.base_url
    settings.WEBSCRAPER_API_TOKEN = TOKEN
    settings.SALVAGE_BACKOFF_BASE = 0.0
    yield served, state
    served.stop()


def load(tmp_path, sitemap: dict | None = SITEMAP, **spec) -> tuple[str, str]:
    """Write the sitemap file and a spec naming it; load the spec. (spec path, sitemap path)"""
    sitemap_path = tmp_path / "shop-products.json"
    if sitemap is not None:
        sitemap_path.write_text(json.dumps(sitemap))
    spec_path = tmp_path / "cloud-shop.toml"
    spec_path.write_text(spec_text(str(sitemap_path), **spec))
    call_command("loaddataset", str(spec_path))
    return str(spec_path), str(sitemap_path)


def push(capsys, *args: str) -> str:
    capsys.readouterr()  # what came before (loaddataset's line) is not this command's
    call_command("cloudsitemap", "cloud-shop", *args)
    return capsys.readouterr().out.strip()


def options() -> dict:
    return Dataset.objects.get(name="cloud-shop").spec["provider_options"]


def test_the_spec_names_a_sitemap_file_or_id_checked_at_load_time(tmp_path):
    path = tmp_path / "bad.toml"
    for text, complaint in [
        (spec_text(None), "webscraper needs sitemap_id, or sitemap_file"),
        (spec_text("shop.xml"), "sitemap_file: 'shop.xml' is not the path of a .json file"),
        (spec_text(None, sitemap_id=0), "sitemap_id: 0 is not a sitemap number"),
        (spec_text("s.json", extra='driver = "slow"\n'), "driver: one of fast, fulljs"),
    ]:
        path.write_text(text)
        with pytest.raises(CommandError, match=complaint) as refused:
            call_command("loaddataset", str(path))
        assert refused.value.returncode == 2
    assert not Dataset.objects.exists()


def test_a_sitemap_that_does_not_validate_is_refused_before_anything_is_sent(
    cloud, tmp_path, capsys
):
    served, _state = cloud
    broken = {**SITEMAP, "selectors": [{**SITEMAP["selectors"][1], "parentSelectors": ["nope"]}]}
    load(tmp_path, broken)
    for args in ((), ("--check",)):
        with pytest.raises(CommandError, match="selector 'title': parent 'nope'") as refused:
            call_command("cloudsitemap", "cloud-shop", *args)
        assert refused.value.returncode == 2
    (tmp_path / "shop-products.json").write_text("{not json")
    with pytest.raises(CommandError, match="not JSON"):
        call_command("cloudsitemap", "cloud-shop")
    assert stats(served)["sitemap_writes"] == 0 and stats(served)["sitemaps"] == {}
    (tmp_path / "shop-products.json").write_text(json.dumps(SITEMAP))
    assert "is valid: 2 selector(s)" in push(capsys, "--check")
    assert stats(served)["sitemap_writes"] == 0  # --check sends nothing


def test_it_creates_updates_or_leaves_the_accounts_sitemap_and_records_its_id(
    cloud, tmp_path, capsys
):
    served, _state = cloud
    spec_path, _sitemap_path = load(tmp_path)
    out = push(capsys)
    (sitemap_id,) = (int(k) for k in stats(served)["sitemaps"])
    assert out == (
        f"dataset cloud-shop: sitemap shop-products created as Cloud sitemap {sitemap_id}; "
        "spec records it"
    )
    assert stats(served)["sitemaps"][str(sitemap_id)]["sitemap"] == SITEMAP
    assert options()["sitemap_id"] == sitemap_id
    assert AuditEntry.objects.filter(action="cloud_sitemap_created").exists()

    assert push(capsys).endswith(f"unchanged as Cloud sitemap {sitemap_id}")
    assert stats(served)["sitemap_writes"] == 1

    changed = {**SITEMAP, "startUrl": ["http://shop.test/", "http://shop.test/sale"]}
    (tmp_path / "shop-products.json").write_text(json.dumps(changed))
    assert push(capsys).endswith(f"updated as Cloud sitemap {sitemap_id}")
    assert stats(served)["sitemaps"][str(sitemap_id)]["sitemap"] == changed

    # The spec file does not hold the id: reloading it forgets it, and the next push finds the
    # sitemap by its name instead of creating a second one.
    call_command("loaddataset", spec_path)
    assert "sitemap_id" not in options()
    assert push(capsys).endswith(f"unchanged as Cloud sitemap {sitemap_id}; spec records it")
    assert len(stats(served)["sitemaps"]) == 1 and options()["sitemap_id"] == sitemap_id


def test_the_services_refusal_is_kept_as_an_incident(cloud, tmp_path, capsys, caplog):
    served, _state = cloud
    caplog.set_level(logging.DEBUG, logger="httpx")
    load(tmp_path)
    push(capsys)
    # Another sitemap of the account, made in the console; the spec names it by mistake.
    made = httpx.post(
        f"{served.base_url}/api/v1/sitemap",
        params={"api_token": TOKEN},
        json={**SITEMAP, "_id": "shop-sale"},
        timeout=5,
    )
    sale_id = made.json()["data"]["id"]
    spec = Dataset.objects.get(name="cloud-shop").spec
    spec["provider_options"]["sitemap_id"] = sale_id
    Dataset.objects.filter(name="cloud-shop").update(spec=spec)
    writes = stats(served)["sitemap_writes"]

    # Renaming it to the name the first one has is refused by the service, not by the file's
    # own checks.
    with pytest.raises(CommandError, match="refused sitemap shop-products") as refused:
        call_command("cloudsitemap", "cloud-shop")
    assert refused.value.returncode == 1
    assert "already been taken" in str(refused.value)
    assert stats(served)["sitemap_writes"] == writes
    incident = Incident.objects.get()
    assert (incident.provider, incident.source, incident.http_status) == (
        "webscraper",
        "sitemap",
        400,
    )
    assert incident.method == "PUT" and "/api/v1/sitemap/" in incident.endpoint
    assert "api_token=[redacted]" in incident.endpoint
    assert "validationErrors" in json.loads(incident.response_body)
    assert incident.request_options == {"sitemap": "shop-products", "sitemap_id": sale_id}
    assert scan_database_for([TOKEN]) == []
    assert not [r for r in caplog.records if TOKEN in r.getMessage()]


def test_a_recovery_batch_launches_with_its_urls_as_one_time_start_urls(cloud, tmp_path, capsys):
    served, state = cloud
    load(tmp_path)
    push(capsys)
    sitemap_id = options()["sitemap_id"]
    run = make_run(Dataset.objects.get(name="cloud-shop"))
    tasks = make_tasks(run, 3)
    state.faults["partial"] = 1  # #2 fails (retried in a new job by itself), #3 comes back empty

    def settled() -> bool:
        remote.step("w1")  # open and send jobs for due tasks, poll the live ones
        live = RemoteJob.objects.filter(state__in=["created", "submitted", "pending"]).exists()
        return not live and not Task.objects.filter(state__in=["pending", "retry_wait"]).exists()

    wait_for(settled, 60, what="the run's jobs to settle")
    first = RemoteJob.objects.order_by("pk").first()
    launched = stats(served)["jobs"][first.provider_job_id]
    assert launched["start_urls"] == [t.url for t in tasks]
    empty = Task.objects.get(pk=tasks[2].pk)
    assert (empty.state, empty.last_error_class) == ("quarantined", "empty_shell")
    jobs_before = RemoteJob.objects.count()

    batch = reruns.create_recovery_batch(
        run.pk,
        error_classes=["empty_shell"],
        reason="the page is filled again",
        scraper_version="2",
        actor="adam",
    )
    wait_for(settled, 60, what="the batch's job to settle")
    (job,) = RemoteJob.objects.order_by("pk")[jobs_before:]
    assert job.input_ref["recovery_batch"] == batch.pk
    assert job.request_options["body"]["start_urls"] == 1
    assert job.request_options["body"]["sitemap_id"] == sitemap_id
    launched = stats(served)["jobs"][job.provider_job_id]
    assert launched["start_urls"] == [tasks[2].url]  # exactly the batch's selection
    assert Task.objects.get(pk=tasks[2].pk).state == "committed"
    # One-time: the sitemap keeps its own start URLs, and nothing wrote to it.
    assert stats(served)["sitemaps"][str(sitemap_id)]["sitemap"] == SITEMAP
    assert stats(served)["sitemap_writes"] == 1
