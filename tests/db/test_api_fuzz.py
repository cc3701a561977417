"""Every operation of the served OpenAPI document, fuzzed against the live server (issue 28).

Schemathesis reads /api/v1/schema from the running server and generates requests for each
operation from it: path parameters, query parameters and declared headers, some with the
names and ids of a real world (an accepted and a published dataset, one outside the token's
scope, one with no run yet) so the generated requests reach the views' reads, not only their
404s. Each is sent with a scoped token, with none and with a forged one; every answer must be
no 5xx and must match the document (status, content type, body shape).

Schemathesis' own pytest integration parametrizes at collection time, before pytest-django's
`live_server` exists, so this drives its Python API: the operation's Hypothesis strategy
inside `@given`. Bounded and derandomized, so CI sees the same requests every run.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from django.core.cache import cache
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.db.test_api import accepted, collect, token_for
from tests.support.acceptance import lenient_shop, make_shop
from tests.support.world import make_user

pytestmark = pytest.mark.django_db(transaction=True)

# Examples per operation: 9 operations, about 400 requests in all. A request without a
# token or with a forged one ends at authentication whatever its parameters, so fewer.
EXAMPLES = {"scoped": 25, "none": 10, "forged": 10}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def world() -> dict[str, list[Any]]:
    """Real values for path parameters: names and run ids inside and outside the scope."""
    mine = accepted()
    published = collect(lenient_shop(), "2026-11-01", "5.00")
    outside = accepted(dataset=make_shop())
    empty = make_shop()
    return {
        "scope": [mine.dataset.name, published.dataset.name, empty.name],
        "name": [mine.dataset.name, published.dataset.name, outside.dataset.name, empty.name],
        "run_id": [mine.pk, published.pk, outside.pk],
    }


def strategy(operation: Any, known: dict[str, list[Any]]) -> st.SearchStrategy[Any]:
    """Generated cases, and cases whose path parameters name the real world."""
    names = {parameter.name for parameter in operation.path_parameters}
    strategies = [operation.as_strategy()]
    for name in names & {"name", "run_id"}:
        strategies.extend(
            operation.as_strategy(path_parameters={name: value}) for value in known[name]
        )
    return st.one_of(strategies)


@pytest.fixture
def api(live_server, settings, tmp_path):
    settings.SALVAGE_EXPORT_CACHE_DIR = tmp_path / "export-cache"
    settings.SALVAGE_OUTBOX_WAKE = False
    settings.SALVAGE_API_RATE = "100000/minute"  # the fuzzing is not the rate limit's test
    cache.clear()
    return f"{live_server.url}/api/v1/"


def test_it_answers_every_operation_without_a_server_error_and_as_documented(api, live_server):
    known = world()
    erin = make_user("erin", "exporter")
    secrets = {
        "scoped": token_for(erin, datasets=known["scope"]),
        "none": None,
        "forged": "slv_00000000_forged",
    }
    schema = schemathesis.openapi.from_url(f"{api}schema")
    operations = [result.ok() for result in schema.get_all_operations()]
    # Every path of the document, each a GET (the API only reads).
    assert {op.path for op in operations} == set(schema.raw_schema["paths"])
    assert {op.method for op in operations} == {"get"}
    failures: list[str] = []
    answered: dict[str, set[int]] = {}
    with requests.Session() as session:
        for operation in operations:
            cases = strategy(operation, known)
            for label, secret in secrets.items():
                headers = {"Authorization": f"Bearer {secret}"} if secret else {}
                statuses = answered.setdefault(f"{operation.label} ({label} token)", set())
                try:
                    fuzz(cases, EXAMPLES[label], live_server.url, session, headers, statuses)
                except (Exception, BaseExceptionGroup) as exc:  # every failure, at once
                    failures.append(f"{operation.label} ({label} token):\n{exc}")
    assert not failures, "\n\n".join(failures)
    # The fuzzing reached the reads, not only the refusals: every operation answered the
    # scoped token with its content at least once, and the others were refused.
    for key, statuses in answered.items():
        if "(scoped token)" in key:
            assert statuses & {200, 206, 304}, (key, statuses)
        else:
            assert statuses == {401}, (key, statuses)


def fuzz(
    cases: Any,
    examples: int,
    base: str,
    session: requests.Session,
    headers: dict[str, str],
    statuses: set[int],
) -> None:
    @hypothesis_settings(SETTINGS, max_examples=examples)
    @given(case=cases)
    def exercise(case: Any) -> None:
        response = case.call(base_url=base, session=session, headers=headers)
        statuses.add(response.status_code)
        case.validate_response(response, checks=CHECKS, headers=headers)

    exercise()


SETTINGS = hypothesis_settings(
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)
