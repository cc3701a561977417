"""A NUL in any query parameter is refused with the 400 page before any query (issue 27).

PostgreSQL refuses a NUL inside text ("A string literal cannot contain NUL (0x00)
characters"), so `/schedules/?dataset=%00` was an HTTP 500 there. Every list page and its CSV
is asked with a NUL in each of its filter parameters, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard import lists
from tests.support.factories import make_dataset, make_run
from tests.support.world import make_user

pytestmark = pytest.mark.django_db

# (page, CSV or "", the list it shows); {run} is a run's id.
LIST_PAGES = [
    ("/runs/", "/runs.csv", lists.RUNS),
    ("/runs/{run}/tasks/", "/runs/{run}/tasks.csv", lists.TASKS),
    ("/runs/{run}/quarantine/", "", lists.QUARANTINE_TASKS),
    ("/reconcile/", "/reconcile.csv", lists.RECONCILE_LIST),
    ("/deliveries/", "/deliveries.csv", lists.DELIVERIES),
    ("/workers/", "/workers.csv", lists.WORKERS),
    ("/audit/", "/audit.csv", lists.AUDIT),
    ("/datasets/", "/datasets.csv", lists.DATASETS),
    ("/exports/", "/exports.csv", lists.DATASETS),
]
NUL = "\x00"


def _cases():
    for page, csv, spec in LIST_PAGES:
        names = [*spec.filterset.base_filters, "sort", "after"]
        for url in (page, csv) if csv else (page,):
            for name in dict.fromkeys(names):
                yield url, name
    for name in ("dataset", "needs"):
        yield "/schedules/", name


@pytest.fixture
def admin():
    client = Client()
    client.force_login(make_user("adam", "admin"))
    return client


@pytest.mark.parametrize(("url", "name"), list(_cases()))
def test_a_nul_in_a_filter_parameter_is_a_400_not_a_500(admin, url, name):
    run = make_run(dataset=make_dataset(name="shop"))
    response = admin.get(url.format(run=run.pk), {name: f"shop{NUL}"})
    assert response.status_code == 400
    assert f"{name}: contains a NUL character" in response.content.decode()


def test_a_nul_in_a_parameter_name_is_refused_too(admin):
    response = admin.get(f"/schedules/?dataset{NUL}=shop")
    assert response.status_code == 400


def test_parameters_without_a_nul_are_served_as_before(admin):
    make_dataset(name="shop")
    assert admin.get("/schedules/", {"dataset": "shop"}).status_code == 200
    assert admin.get("/runs/", {"q": "shop"}).status_code == 200
