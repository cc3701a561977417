"""A listing that states more items than its walk found flags the run and, with an
`inventory_shortfall` rule, blocks its acceptance; a failed head re-read fails the walk's last
page with its class instead of writing a log line (issue 30).

The sandbox's listing can overstate its total (`listing_overstate`) and fail chosen offset
requests (`listing_fail_requests`); its own numbers drive the expectations.
"""

from __future__ import annotations

import copy

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.templatetags.dashboard_tags import breakable
from recovery import worker
from recovery.intake import specs
from recovery.intake.spec_checks import SpecError
from recovery.keys import canonical_url
from recovery.models import Attempt, ListingTotal, Task, ValidationResult
from recovery.quality import acceptance, shortfall
from tests.support.direct import SHOP_SPEC, create_run, load_shop
from tests.support.world import make_users

TOTAL = {"selector": "div.listing", "attr": "data-total"}
RULES = [
    {"name": "coverage", "kind": "coverage", "min": 0.9},
    {"name": "inventory", "kind": "inventory_shortfall", "max_share": 0.0},
]


def listing_with_total() -> dict:
    page_types = copy.deepcopy(SHOP_SPEC["page_types"])
    page_types["listing"]["cursor"]["total"] = TOTAL
    return page_types


@pytest.mark.django_db(transaction=True)
def test_a_listing_stating_120_items_that_lists_100_fails_its_shortfall_rule(
    make_sandbox, tmp_path
):
    shop = make_sandbox(pages=100, faults="none", listing_limit=10, listing_overstate=20)
    load_shop("short", page_types=listing_with_total(), rules=RULES)
    first = canonical_url(shop.url("/listing?offset=0&limit=10"))
    run = create_run("short", [(first, "listing")], tmp_path)
    worker.run_until_idle("short-test", idle_wait=1.0)

    tasks = Task.objects.filter(run=run)
    assert set(tasks.values_list("state", flat=True)) == {"committed"}
    assert tasks.filter(page_type="product").count() == 100
    walk = ListingTotal.objects.get(run=run)
    assert (walk.url, walk.stated, walk.found, walk.missing) == (first, 120, 100, 20)

    run.refresh_from_db()
    assert run.acceptance_state == "candidate"
    results = {r.rule: r for r in ValidationResult.objects.filter(run=run, partition="")}
    assert results["coverage"].passed and results["coverage"].value == 1.0  # coverage is fooled
    short = results["inventory"]
    assert not short.passed
    assert short.value == pytest.approx(20 / 120) and short.threshold == 0.0
    summary = "listings state 120 items, 100 found (20 missing, 16.7%)"
    assert short.detail["summary"].startswith(summary)
    with pytest.raises(acceptance.AcceptanceError, match="inventory: listings state 120 items"):
        acceptance.accept_run(run.pk, "tester")

    client = Client()
    client.force_login(make_users()["admin"])
    html = client.get(reverse("dashboard:run", kwargs={"run_id": run.pk})).content.decode()
    assert 'id="inventory-shortfall"' in html
    assert summary in html
    # The URL as the page shows it: escaped, breakable after its separators.
    assert f"{breakable(first)}</span>: states 120 items, 100 found" in html


@pytest.mark.django_db(transaction=True)
def test_a_failed_head_re_read_fails_the_last_page_with_its_class_and_it_is_retried(
    make_sandbox, tmp_path, settings
):
    settings.SALVAGE_BACKOFF_BASE = 0.05
    # Ten walk pages (offset requests 1-10), then the head re-read: request 11 answers 503.
    shop = make_sandbox(pages=100, faults="none", listing_limit=10, listing_fail_requests=(11,))
    load_shop("headfail", page_types=listing_with_total(), rules=RULES)
    run = create_run("headfail", [(shop.url("/listing?offset=0&limit=10"), "listing")], tmp_path)
    worker.run_until_idle("headfail-test", idle_wait=2.0)

    last = Task.objects.get(run=run, url=canonical_url(shop.url("/listing?offset=90&limit=10")))
    attempts = list(Attempt.objects.filter(task=last).order_by("started_at"))
    assert [a.outcome for a in attempts] == ["retry", "committed"]
    failed = attempts[0]
    assert (failed.error_class, failed.http_status) == ("server_error", 503)
    assert failed.error_detail.startswith("head re-read of ")
    assert "HTTP 503" in failed.error_detail
    assert set(Task.objects.filter(run=run).values_list("state", flat=True)) == {"committed"}
    # With the head read at last, the walk's count is whole: nothing missing, the rule passes.
    walk = ListingTotal.objects.get(run=run)
    assert (walk.stated, walk.found) == (100, 100)
    assert ValidationResult.objects.get(run=run, rule="inventory", partition="").passed
    assert shortfall.shortfall(run.pk).missing == 0


def test_the_rule_kind_is_checked_by_name_and_key():
    raw = copy.deepcopy(SHOP_SPEC)
    raw["rules"] = [{"name": "short", "kind": "inventory_shortfall"}]
    assert specs.validate(raw)["rules"] == [
        {"name": "short", "kind": "inventory_shortfall", "max_share": 0.0}
    ]
    raw["rules"] = [{"name": "short", "kind": "inventory_shortfall", "max_share": 1.5}]
    with pytest.raises(SpecError, match=r"rules\.short\.max_share: a share must be between"):
        specs.validate(raw)
    raw["rules"] = [{"name": "short", "kind": "inventory_shortfall", "min": 0.5}]
    with pytest.raises(SpecError, match="min"):
        specs.validate(raw)
