"""The dashboard in headless Chromium: each role logs in and does its job end to end.

The live server and a real `manage.py work` process share the test database. Screenshots of
the main pages go to test-output/screenshots/ (README's set is copied to docs/screenshots/).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from recovery.models import (
    AuditEntry,
    Observation,
    RecoveryBatch,
    RemoteJob,
    Run,
    RunPartition,
    Task,
)
from tests.support.engine_procs import Procs
from tests.support.world import PASSWORD, make_users, make_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(transactional_db):
    users = make_users()
    w = make_world()
    w.users = users
    return w


def log_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("header .logout span")).to_have_text(username)


def test_each_role_logs_in_and_sees_its_pages(world, live_server, page, screenshot):
    page.goto(f"{live_server.url}/runs/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/runs/"))
    screenshot(page, "login")

    log_in(page, live_server, "olivia")
    expect(page.locator("h1")).to_have_text("Runs")
    nav = page.locator("header nav")
    expect(nav.get_by_role("link", name="Reconcile")).to_be_visible()
    expect(nav.get_by_role("link", name="Audit log")).to_have_count(0)
    expect(nav.get_by_role("link", name="Exports")).to_have_count(0)
    page.click("header .logout button")

    log_in(page, live_server, "adam")
    expect(page.locator("h1")).to_have_text("Runs")
    expect(page.locator("header nav").get_by_role("link", name="Audit log")).to_be_visible()
    screenshot(page, "runs")
    page.goto(f"{live_server.url}/runs/{world.run.pk}/")
    expect(page.locator("#run-grid tr.quarantined")).to_have_count(1)
    screenshot(page, "run-detail")
    page.goto(f"{live_server.url}/audit/")
    expect(page.locator("#audit")).to_contain_text("seed")
    screenshot(page, "audit")
    page.goto(f"{live_server.url}/deliveries/")
    expect(page.get_by_role("button", name="Retry").first).to_be_visible()
    screenshot(page, "deliveries")
    page.goto(f"{live_server.url}/workers/")
    expect(page.locator("h1")).to_have_text("Workers and leases")
    screenshot(page, "workers")
    page.click("header .logout button")

    log_in(page, live_server, "erin")
    # An exporter's home is the data they may read; the nav holds their three pages only.
    expect(page.locator("h1")).to_have_text("Your data")
    links = page.locator("header nav").get_by_role("link")
    expect(links).to_have_text(["Your data", "Exports", "API tokens"])
    response = page.goto(f"{live_server.url}/runs/")
    assert response.status == 403


def test_an_operator_triages_a_quarantined_partition_without_a_rerun_button(
    world, live_server, page, screenshot
):
    log_in(page, live_server, "olivia")
    page.goto(f"{live_server.url}/runs/{world.run.pk}/quarantine/")
    row = page.locator("#partitions tr[data-partition='beta.test']")
    expect(row).to_have_class(re.compile("quarantined"))
    # Scraped payloads are text on the page, and nothing executed (the page fixture checks
    # that no dialog opened and no script error happened).
    expect(page.locator("#error-groups pre.excerpt").first).to_contain_text("<script>")
    expect(page.get_by_role("button", name="Create recovery batch")).to_have_count(0)
    expect(page.locator("#batch-form")).to_have_count(0)

    row.get_by_role("button", name="Mark reviewed").click()
    expect(page.locator(".message.success")).to_contain_text("beta.test marked reviewed")
    expect(page.locator("#partitions tr[data-partition='beta.test']")).to_contain_text("olivia")
    page.fill("#note-form input[name=partition]", "beta.test")
    page.fill("#note-form textarea[name=text]", "Login wall since Tuesday: selector fix needed.")
    page.click("#note-form button[type=submit]")
    expect(page.locator(".message.success")).to_have_text("Note added.")
    expect(page.locator("ul.notes")).to_contain_text("Login wall since Tuesday")
    screenshot(page, "quarantine-operator")

    assert RunPartition.objects.get(run=world.run, name="beta.test").reviewed_by == "olivia"
    assert AuditEntry.objects.filter(actor="olivia", action="add_note").exists()

    page.goto(f"{live_server.url}/tasks/{world.quarantined_task.pk}/")
    expect(page.locator("#attempts")).to_contain_text("selector_failure")
    expect(page.locator("dd.url")).to_contain_text("javascript:alert(1)")
    assert page.locator("a[href^='javascript:']").count() == 0
    screenshot(page, "task-detail")


def test_an_admin_creates_a_recovery_batch_and_watches_it_finish(
    world, live_server, page, screenshot, tmp_path
):
    log_in(page, live_server, "adam")
    page.goto(f"{live_server.url}/runs/{world.run.pk}/quarantine/")
    form = page.locator("#batch-form")
    form.locator("input[name=partitions][value='beta.test']").check()
    form.locator("input[name=partitions][value='gamma.test']").check()
    form.locator("textarea[name=reason]").fill("selector fixed for the new product template")
    form.locator("input[name=scraper_version]").fill("2")
    screenshot(page, "quarantine-admin")
    form.get_by_role("button", name="Create recovery batch").click()
    # Select -> confirm -> one engine call: nothing is reset before the confirmation.
    expect(page.locator("#batch-summary")).to_contain_text("beta.test, gamma.test")
    # The exact count, by the query the batch runs: the 4 quarantined tasks of beta and gamma.
    expect(page.locator("#batch-count")).to_have_text("4")
    screenshot(page, "batch-confirm")
    assert not RecoveryBatch.objects.filter(run=world.run).exists()
    page.get_by_role("button", name="Confirm: reset 4 tasks").click()

    expect(page.locator(".message.success")).to_contain_text("4 tasks queued")
    expect(page.locator("#batch-state")).to_have_text("running, 0 of 4 settled")
    batch = RecoveryBatch.objects.get(run=world.run)
    assert batch.task_count == 4
    assert sorted(batch.selection["partitions"]) == ["beta.test", "gamma.test"]

    procs = Procs(tmp_path)
    try:
        procs.manage("worker", "work", "--concurrency", "4", "--worker-id", "browser-w1")
        # The page refreshes itself every 2 s: the settled count climbs to 4 of 4.
        expect(page.locator("#batch-settled")).to_have_text("4", timeout=60_000)
        # The worker's acceptance step completes the batch (revalidation); the page shows it.
        # Every task committed, but the noop provider's rows lack the required title: nothing
        # was recovered, and the badge says so rather than a green "completed".
        expect(page.locator("#batch-state")).to_have_text(
            "completed, 0 of 4 recovered", timeout=60_000
        )
        expect(page.locator("#batch-state")).to_have_class(re.compile("tone-bad"))
        expect(page.locator("#batch-outcome")).to_contain_text("still failing 4")
        screenshot(page, "recovery-batch")
        assert set(Task.objects.filter(recovery_batch=batch).values_list("state", flat=True)) == {
            "committed"
        }
        page.goto(f"{live_server.url}/runs/{world.run.pk}/")
        expect(page.locator("svg.chart rect").first).to_be_attached()
        screenshot(page, "run-detail-after-batch")
        # The worker is still running: its heartbeat is on the workers page.
        page.goto(f"{live_server.url}/workers/")
        expect(page.locator("#workers-live")).to_contain_text("browser-w1", timeout=30_000)
        screenshot(page, "workers")
    finally:
        for proc in procs.children:
            procs.stop(proc)
        procs.close()


def test_an_admin_accepts_a_run_through_its_confirmation(world, live_server, page, screenshot):
    log_in(page, live_server, "adam")
    page.goto(f"{live_server.url}/runs/{world.candidate.pk}/")
    # Hovering a figure's name shows its one definition (the glossary's words).
    throughput = page.locator("#run-figures a.term", has_text="Throughput")
    assert "worker held one of the run's leases" in throughput.get_attribute("title")
    page.get_by_role("link", name="Accept run…").click()
    expect(page.locator("h1")).to_have_text(f"Accept run #{world.candidate.pk}?")
    expect(page.locator("#consequences")).to_contain_text(
        f"become the current dataset shop, replacing run #{world.accepted.pk}"
    )
    screenshot(page, "accept-confirm")
    # Nothing happened yet: the page only explains.
    assert Run.objects.get(pk=world.candidate.pk).acceptance_state == "candidate"
    page.get_by_role("button", name=f"Yes, accept run #{world.candidate.pk}").click()
    expect(page.locator(".message.success")).to_contain_text("accepted")
    expect(page.locator("#run-figures")).to_contain_text("accepted")
    # A finished run shows no ETA.
    expect(page.locator("#eta")).to_contain_text("run is accepted")
    assert Run.objects.get(pk=world.candidate.pk).acceptance_state == "accepted"
    assert AuditEntry.objects.filter(actor="adam", action="accept_run").exists()
    # Publish goes through its own confirmation; going back changes nothing.
    page.get_by_role("link", name="Publish run…").click()
    expect(page.locator("#consequences")).to_contain_text("published dataset")
    page.get_by_role("link", name="No, go back").click()
    assert Run.objects.get(pk=world.candidate.pk).acceptance_state == "accepted"
    page.get_by_role("link", name="Glossary").click()
    expect(page.locator("#glossary")).to_contain_text("Acceptance coverage")


def test_an_operator_resolves_a_reconcile_item(world, live_server, page, screenshot):
    log_in(page, live_server, "olivia")
    page.goto(f"{live_server.url}/reconcile/")
    card = page.locator(f"#job-{world.job.pk}")
    expect(card).to_contain_text("unknown")
    expect(card).to_contain_text("Original attempt")
    screenshot(page, "reconcile")
    card.locator("input[name=provider_job_id]").fill("msr-job-4242")
    card.locator("form[action$='/attach'] input[name=reason]").fill(
        "found in the provider's console, created 10:02"
    )
    card.get_by_role("button", name="Attach job id").click()
    expect(page.locator(".message.success")).to_contain_text("job id attached")

    job = RemoteJob.objects.get(pk=world.job.pk)
    assert job.provider_job_id == "msr-job-4242"
    assert job.resolved_by == "olivia"
    # The decision and the original attempt stay visible in the full list.
    page.goto(f"{live_server.url}/reconcile/?state={job.state}")
    card = page.locator(f"#job-{world.job.pk}")
    expect(card).to_contain_text("msr-job-4242")
    expect(card).to_contain_text("found in the provider's console")
    expect(card).to_contain_text(str(job.attempt_id))
    expect(card.get_by_role("button", name="Attach job id")).to_have_count(0)


def test_an_exporter_downloads_exactly_the_accepted_rows(world, live_server, page, screenshot):
    log_in(page, live_server, "erin")
    page.locator("header nav").get_by_role("link", name="Exports").click()
    expect(page.locator("#exports")).to_contain_text(world.accepted.window)
    screenshot(page, "exports")
    with page.expect_download() as info:
        page.locator("#exports").get_by_role("link", name="CSV").first.click()
    download = info.value
    text = Path(download.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    expected = set(
        Observation.objects.filter(pk__in=[o.pk for o in world.accepted_rows]).values_list(
            "observation_key", flat=True
        )
    )
    assert {row["observation_key"] for row in rows} == expected
    assert len(rows) == len(expected) == 2
    assert "held back" not in text and "invalid one" not in text
