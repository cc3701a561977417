"""The webhook scenario: Web Scraper Cloud's final-status notification, twice, then a Continue.

In: the `Drill` (its sandbox's Web Scraper simulator and the webhook secret it gave the
workers). Out: the scenario's figures: one job created at the provider, every row imported
once, no observation duplicated by the repeated notification or by the Continue's re-sync.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from typing import Any

from recovery.ops.processes import wait_until
from recovery.showroom.drill.options import ACTOR, WINDOW
from recovery.showroom.drill.report import missing_module, not_ok
from recovery.showroom.drill.runner import Drill

CLOUD_DATASET = "drill-cloud"
CLOUD_SPEC = """name = "drill-cloud"
provider = "webscraper"
scraper_version = "1"

[entity_key]
from = "url"

[partition]
rule = "host"

[provider_options]
sitemap_id = 7
poll_interval = 0.5

[page_types.product.fields]
title = { selector = "h1", required = true }
"""


def webhook_scenario(drill: Drill) -> dict[str, Any]:
    """A Web Scraper Cloud job whose final-status webhook arrives twice, then a Continue that
    adds rows and notifies again: one job, every row imported once, nothing duplicated."""
    absent = missing_module(
        "recovery.remote.webhooks", "recovery.providers.webscraper", "recovery.sandbox.webscraper"
    )
    if absent:
        return not_ok(absent)
    from django.db.models import Count
    from django.test import Client

    from recovery.intake import manifests, specs
    from recovery.models import Observation, RemoteJob, RemoteJobItem, WebhookReceipt

    spec_path = drill.workdir / "drill-cloud.toml"
    spec_path.write_text(CLOUD_SPEC)
    specs.load_dataset(spec_path)
    manifest = drill.workdir / "drill-cloud.csv"
    manifest.write_text(
        "url,page_type\n" + "".join(f"{drill.base_url}/product/{i},product\n" for i in (1, 2, 3))
    )
    run_id = manifests.create_run(CLOUD_DATASET, WINDOW, manifest, actor=ACTOR).run.pk
    sim = f"{drill.base_url}/webscraper"

    def job():
        return RemoteJob.objects.filter(run_id=run_id).order_by("pk").first()

    def sim_job() -> dict[str, Any]:
        current = job()
        jobs = drill.sandbox_get("/webscraper/_sim/stats")["jobs"]
        return jobs.get(str(current.provider_job_id), {}) if current else {}

    def observations() -> int:
        return Observation.objects.filter(run_id=run_id).count()

    timeout = min(drill.options.timeout, 120)
    wait_until(
        lambda: (j := job()) is not None and j.state == "completed",
        timeout=timeout,
        what="the cloud job completing",
    )
    first_rows = sim_job()["rows"]
    wait_until(lambda: observations() >= first_rows, timeout=timeout, what="the first import")

    client = Client(HTTP_HOST="127.0.0.1")
    hook = f"/hooks/webscraper/{drill.webhook_secret}"
    form = {
        "scrapingjob_id": job().provider_job_id,
        "status": "finished",
        "sitemap_id": "7",
        "sitemap_name": "drill",
        "custom_id": str(run_id),
    }
    # The same notification, twice (the service resends when unsure it was received).
    answers = [client.post(hook, form).status_code, client.post(hook, form).status_code]
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: job().state == "completed", timeout=timeout, what="re-sync")
    after_duplicates = observations()

    # Continue: the job runs again, adds rows, and notifies once more.
    request = urllib.request.Request(
        f"{sim}/_sim/continue/{job().provider_job_id}",
        data=json.dumps({"rows": 3}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()
    wait_until(
        lambda: sim_job().get("status") == "finished" and sim_job()["rows"] == first_rows + 3,
        timeout=timeout,
        what="the Continue finishing",
    )
    answers.append(client.post(hook, form).status_code)
    with contextlib.suppress(TimeoutError):
        wait_until(
            lambda: observations() >= first_rows + 3, timeout=timeout, what="the Continue import"
        )
    stats = drill.sandbox_get("/webscraper/_sim/stats")
    duplicates = sum(
        row["n"] - 1
        for row in Observation.objects.filter(run_id=run_id)
        .values("entity_key")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
    )
    figures = {
        "jobs_created_at_provider": stats["created"],
        "remote_jobs": RemoteJob.objects.filter(run_id=run_id).count(),
        "webhook_answers": answers,
        "webhook_receipts": WebhookReceipt.objects.filter(job__run_id=run_id).count(),
        "rows_at_provider": sim_job()["rows"],
        "items_imported": RemoteJobItem.objects.filter(job__run_id=run_id).count(),
        "observations_after_duplicate_webhook": after_duplicates,
        "observations": observations(),
        "duplicate_observations": duplicates,
    }
    figures["ok"] = (
        figures["jobs_created_at_provider"] == 1
        and figures["remote_jobs"] == 1
        and answers == [200, 200, 200]
        and after_duplicates == first_rows
        and figures["observations"] == first_rows + 3
        and duplicates == 0
    )
    return figures
