"""value_shift rules as an early warning while a run collects (issue 28: window gates "usable in
provisional checks"): prices doubled on the first 40 pages flag the run, with the figures in
words, once, in the audit log and on the run page; steady prices, too few numbers and the
first window of a dataset flag nothing; nothing is held either way."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from recovery.models import AuditEntry, Observation, Run, ShiftSample
from recovery.quality import provisional, provisional_shift
from recovery.states.choices import RunState
from tests.db.test_window_gates import catalogue, first_window, gated_shop
from tests.support.acceptance import commit_task
from tests.support.factories import make_run, make_tasks
from tests.support.world import make_users

pytestmark = pytest.mark.django_db


def collecting(dataset, n: int, *, double: bool, window: str = "2026-12-01") -> Run:
    """A run still collecting: n of its 2n tasks committed (the rest not yet run)."""
    run = make_run(dataset, window=window)
    rows = catalogue(n, double=double)
    for partition, payloads in rows.items():
        tasks = make_tasks(run, 2 * len(payloads), partition=partition, host=f"{partition}.test")
        for task, payload in zip(tasks, payloads, strict=False):
            commit_task(task, payload)
    run.refresh_from_db()
    assert run.acceptance_state == RunState.COLLECTING
    return run


def test_doubled_prices_flag_the_collecting_run_once_with_the_figures():
    dataset = gated_shop()
    previous = first_window(dataset, n=40)
    run = collecting(dataset, 40, double=True)

    assert provisional_shift.due()
    assert provisional_shift.check_run(run.pk) == ["prices_steady"]
    sample = ShiftSample.objects.get(run=run, rule="prices_steady")
    assert sample.read == 40 and len(sample.values) == 40
    assert sample.previous["window"] == previous.window
    assert sample.reason.startswith(
        "rule prices_steady: price, previous window 2026-11-30: median 13.50"
    )
    assert "the first 40 observations: median 27.00 (+100%)" in sample.reason
    assert sample.reason.endswith("— max change 30%")
    # Once: a second pass reads nothing new and flags nothing; the audit says it once.
    assert provisional_shift.check_run(run.pk) == []
    entry = AuditEntry.objects.get(action="provisional_shift")
    assert entry.reason == sample.reason and entry.object_id == str(run.pk)
    assert not provisional_shift.due()

    # Shown on the run page while it collects; nothing held.
    client = Client()
    client.force_login(make_users()["operator"])
    html = client.get(reverse("dashboard:run", args=[run.pk])).content.decode()
    assert 'id="provisional-shifts"' in html and 'data-rule="prices_steady"' in html
    assert "the first 40 observations: median 27.00 (+100%)" in html
    assert Observation.objects.filter(run=run).count() == 40
    run.refresh_from_db()
    assert run.acceptance_state == RunState.COLLECTING


def test_steady_prices_and_too_few_numbers_flag_nothing():
    dataset = gated_shop()
    first_window(dataset, n=40)
    steady = collecting(dataset, 40, double=False)
    assert provisional_shift.check_run(steady.pk) == []
    assert ShiftSample.objects.get(run=steady).read == 40

    few = collecting(dataset, provisional_shift.MIN_SAMPLE - 1, double=True, window="2026-12-02")
    assert provisional_shift.check_run(few.pk) == []
    sample = ShiftSample.objects.get(run=few)
    assert sample.flagged_at is None and len(sample.values) == provisional_shift.MIN_SAMPLE - 1
    # The next observations are read from the watermark on, and then it is judged.
    tasks = make_tasks(few, 4, partition="north", host="north.test")
    for i, task in enumerate(tasks, start=100):
        commit_task(task, {"title": f"Item {i}", "price": "27.00", "sku": f"SKU-{i}"})
    assert provisional_shift.check_run(few.pk) == ["prices_steady"]
    assert ShiftSample.objects.get(run=few).read == provisional_shift.MIN_SAMPLE + 3


def test_the_first_window_has_nothing_to_compare_and_is_never_flagged(monkeypatch):
    dataset = gated_shop()
    run = collecting(dataset, 40, double=True, window="2026-11-29")
    # The engine's step samples every collecting run (not throttled here: a fresh process).
    monkeypatch.setitem(provisional._last_check, "at", 0.0)
    assert provisional.check_due() == 0
    assert ShiftSample.objects.get(run=run).previous is None
    assert not provisional_shift.due()
    assert not AuditEntry.objects.filter(action="provisional_shift").exists()
