"""A 401/403 is retried a bounded number of times before it quarantines (issue 31, item 4).

Seed 002's table quarantines a *persistent* 403: the first refusal is `auth_refused`, retried
`refusal_retries` times `refusal_retry_seconds` apart (each retry a new claim, so a fresh cookie
jar); a page still refused after that is `access_denied`, quarantined for a person. Run
against the sandbox shop's `/refused/{status}/{times}/{i}` over real sockets.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from recovery import worker
from recovery.intake.specs import SpecError
from recovery.models import Attempt, Task
from tests.support.direct import create_run, load_shop, shop_spec

pytestmark = pytest.mark.django_db(transaction=True)


def attempts_of(task: Task) -> list[Attempt]:
    return list(Attempt.objects.filter(task=task).order_by("started_at"))


def run_refused(make_sandbox, tmp_path, name: str, path: str, **options) -> Task:
    shop = make_sandbox(pages=5, faults="none")
    load_shop(name, provider_options={"refusal_retry_seconds": 1, **options})
    run = create_run(name, [(shop.url(path), "product")], tmp_path)
    worker.run_until_idle(f"{name}-worker", idle_wait=3.0)
    return Task.objects.get(run=run)


def test_it_commits_a_page_refused_once(make_sandbox, tmp_path):
    task = run_refused(make_sandbox, tmp_path, "auth-once", "/refused/403/1/2")

    assert task.state == "committed"
    first, second = attempts_of(task)
    assert (first.outcome, first.error_class, first.http_status) == ("retry", "auth_refused", 403)
    assert second.outcome == "committed"
    waited = (second.started_at - first.finished_at).total_seconds()
    assert waited >= 0.95  # refusal_retry_seconds, not the 5xx backoff


@pytest.mark.parametrize("status", [403, 401])
def test_it_quarantines_a_persistent_refusal_after_the_configured_retries(
    make_sandbox, tmp_path, status
):
    task = run_refused(
        make_sandbox, tmp_path, f"auth-always-{status}", f"/refused/{status}/0/3", refusal_retries=2
    )

    assert task.state == "quarantined"
    assert task.last_error_class == "access_denied"
    attempts = attempts_of(task)
    assert [(a.outcome, a.error_class, a.http_status) for a in attempts] == [
        ("retry", "auth_refused", status),
        ("retry", "auth_refused", status),
        ("quarantined", "access_denied", status),
    ]
    for before, after in itertools.pairwise(attempts):
        assert (after.started_at - before.finished_at).total_seconds() >= 0.95
    assert "persistent after 2 auth retries" in attempts[-1].error_detail


def test_it_quarantines_at_once_with_no_refusal_retries(make_sandbox, tmp_path):
    task = run_refused(make_sandbox, tmp_path, "auth-none", "/refused/403/0/4", refusal_retries=0)

    assert task.state == "quarantined"
    assert [a.error_class for a in attempts_of(task)] == ["access_denied"]


def test_it_schedules_the_retry_after_the_default_interval(make_sandbox, tmp_path):
    shop = make_sandbox(pages=5, faults="none")
    load_shop("auth-default")
    run = create_run("auth-default", [(shop.url("/refused/403/0/5"), "product")], tmp_path)

    assert worker.run_batch("auth-default-worker")

    task = Task.objects.get(run=run)
    (attempt,) = attempts_of(task)
    assert task.state == "retry_wait"
    assert attempt.error_class == "auth_refused"
    # Ten minutes (REFUSAL_RETRY_SECONDS), measured from the attempt's end.
    gap = task.next_attempt_at - attempt.finished_at
    assert timedelta(seconds=598) <= gap <= timedelta(seconds=602)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"refusal_retries": -1}, "provider_options.refusal_retries: must be >= 0"),
        ({"refusal_retries": 1.5}, "provider_options.refusal_retries: must be an integer"),
        ({"refusal_retries": True}, "provider_options.refusal_retries: must be a number"),
        ({"refusal_retry_seconds": 0}, "provider_options.refusal_retry_seconds: must be >= 1"),
        (
            {"refusal_retry_seconds": "10m"},
            "provider_options.refusal_retry_seconds: must be a number",
        ),
        (
            {"refusal_retry_seconds": 86400},
            "provider_options.refusal_retry_seconds: must be <= 3600",
        ),
    ],
)
def test_it_refuses_bad_auth_retry_settings(options, message):
    with pytest.raises(SpecError) as caught:
        shop_spec("auth-bad", provider_options=options)
    assert message in str(caught.value)
