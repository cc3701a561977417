"""What the asynchronous providers (messora, tornado, webscraper) share with the engine's
remote-job lifecycle (recovery.remote): the protocol they implement, the values they return,
the HTTP handling that sorts a create call's failures into "certainly not created" and "may
have been created", and the sanitising of what is stored. Providers never touch the database;
this module imports nothing of the engine above recovery.providers.

Every error answer keeps its `Exchange` (method, endpoint, status, headers, body; sanitised by
recovery.ops.sanitise, the one sanitiser of responses): the lifecycle writes it as an Incident
when the answer is terminal (seed 001 §04).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import httpx

from recovery.failures import parse_retry_after
from recovery.ops import incidents, logs
from recovery.ops.incidents import Exchange as Exchange
from recovery.ops.sanitise import clean_payload as clean_payload
from recovery.ops.sanitise import sanitise as sanitise
from recovery.outcomes import ErrorClass, Outcome, TaskInput

# httpx logs each request's full URL at INFO, and Web Scraper Cloud's token is a query
# parameter: redact on the logger itself, so every handler (and test capture) sees it clean.
for _name in ("httpx", "httpcore"):
    logging.getLogger(_name).addFilter(logs.RedactSecretsFilter())


@dataclass(slots=True)
class RemoteTask:
    """What a provider needs to know about one task of a job (copied from input_ref)."""

    task_id: int
    url: str
    navigation: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Submitted:
    provider_job_id: str
    response: dict[str, Any] = field(default_factory=dict)  # sanitised


class SubmitRejected(Exception):
    """The provider certainly did not create a job (nothing sent, or an explicit refusal)."""

    def __init__(
        self,
        error_class: ErrorClass,
        detail: str,
        http_status: int | None = None,
        retry_after: float | None = None,
        exchange: Exchange | None = None,
    ) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
        self.http_status = http_status
        self.retry_after = retry_after
        self.exchange = exchange  # the refusal as received, when there was an answer


class SubmitAmbiguous(Exception):
    """The request may have reached the provider: a job may exist (-> unknown, reconcile)."""

    def __init__(
        self, detail: str, http_status: int | None = None, exchange: Exchange | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.http_status = http_status
        self.exchange = exchange


class ResultUnavailable(Exception):
    """A fresh link could not be obtained (the job is not completed, the lookup failed, or
    the provider keeps no result object)."""


@dataclass(slots=True)
class RemoteItem:
    """One result entry of a job. `payload` is None for a failed item."""

    index: int
    url: str
    status: str
    payload: dict[str, Any] | None = None
    task_url: str = ""  # the submitted URL this item came from, when it differs from `url`


class Poll:
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    REVOKED = "revoked"
    NOT_FOUND = "not_found"  # 404: unknown id or another tenant's job
    RETRY = "retry"  # the status request itself failed (network, 5xx): not a job failure
    RATE_LIMITED = "rate_limited"


@dataclass(slots=True)
class JobStatus:
    outcome: str  # a Poll value
    items: list[RemoteItem] = field(default_factory=list)
    credits_used: int | None = None
    stopped_reason: str = ""
    retry_after: float | None = None
    detail: str = ""
    response: dict[str, Any] = field(default_factory=dict)  # sanitised, kept in last_response
    result_ref: str = ""  # media: a stable object reference, not a temporary URL
    # The answer as received, for a failure (FAILURE, REVOKED, NOT_FOUND, a failed request):
    # kept as an Incident when it ends the job.
    exchange: Exchange | None = None


# Runtime-checkable so recovery.remote can refuse a dataset whose provider is not remote.
@runtime_checkable
class RemoteProvider(Protocol):
    name: str
    remote: bool  # True: the worker calls recovery.remote, never execute_many
    poll_interval: float  # seconds between status checks (2 s for seed 000's API)
    poll_timeout: float  # per-job deadline, seconds after submission
    kind: str  # RemoteJob.Kind of the jobs this provider opens
    tasks_per_job: int
    # True: a completed job's result (result_ref) is handed to the consumer through the
    # outbox (OutboxEvent media_handoff), and result_url links to it.
    handoff: bool

    def request_options(self, tasks: list[RemoteTask], run_id: int) -> dict[str, Any]:
        """What will be sent, without credentials (stored in RemoteJob.request_options)."""
        ...

    async def submit(self, tasks: list[RemoteTask], run_id: int) -> Submitted:
        """Create the remote job; raise SubmitRejected or SubmitAmbiguous on failure."""
        ...

    async def status(self, provider_job_id: str) -> JobStatus:
        """Look the job up; on success include its items."""
        ...

    async def result_url(self, provider_job_id: str, result_ref: str) -> str:
        """A working link to a completed job's stored result (`result_ref`, from its
        JobStatus), obtained by a lookup, never by running the job again; raise
        ResultUnavailable when there is none."""
        ...

    async def aclose(self) -> None: ...


_SENT_ERRORS = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


_NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def retry_after_of(response: httpx.Response) -> float | None:
    return parse_retry_after(response.headers.get("retry-after"), datetime.now(UTC))


def exchange_of(response: httpx.Response, *, strip_query: bool = False) -> Exchange:
    """What an Incident keeps of a response: the request's method and URL (credentials
    redacted; `strip_query` drops the query, for a signed link whose signature is its query),
    the status, the headers and the body, sanitised."""
    url = str(response.request.url)
    if strip_query:
        url = url.split("?", 1)[0]
    try:
        text = response.text
    except Exception:  # undecodable body: the status and headers say enough
        text = ""
    return incidents.exchange(
        response.request.method, url, response.status_code, response.headers.multi_items(), text
    )


def excerpt(response: httpx.Response, limit: int = 500) -> str:
    try:
        return logs.redact(response.text[:limit])
    except Exception:  # undecodable body: the status says enough
        return ""


async def send_create(
    client: httpx.AsyncClient, method: str, url: str, *, deadline: float, **kwargs: Any
) -> httpx.Response:
    """Send a create request and sort its failures into "certainly not created" (SubmitRejected)
    and "may have been created" (SubmitAmbiguous). Returns the 2xx response."""
    safe_url = logs.redact(url)
    try:
        response = await asyncio.wait_for(client.request(method, url, **kwargs), deadline)
    except _NOT_SENT_ERRORS as exc:
        # No connection was made: the provider cannot have seen the request.
        raise SubmitRejected(ErrorClass.NETWORK, f"{type(exc).__name__} to {safe_url}") from None
    except (TimeoutError, *_SENT_ERRORS) as exc:
        raise SubmitAmbiguous(
            f"{type(exc).__name__} after sending to {safe_url}: the job may exist"
        ) from None
    except httpx.HTTPError as exc:
        raise SubmitAmbiguous(f"{type(exc).__name__} sending to {safe_url}") from None
    status = response.status_code
    if 200 <= status < 300:
        return response
    detail = f"HTTP {status} from {safe_url}: {excerpt(response, 200)}"
    seen = exchange_of(response)
    if status == 429:
        raise SubmitRejected(
            ErrorClass.RATE_LIMITED, detail, status, retry_after_of(response), seen
        )
    if status in (401, 403):
        raise SubmitRejected(ErrorClass.ACCESS, detail, status, exchange=seen)
    if status == 503:
        # "Unavailable" refuses the request before processing it (with Retry-After).
        raise SubmitRejected(ErrorClass.SERVER, detail, status, retry_after_of(response), seen)
    if 400 <= status < 500:
        raise SubmitRejected(ErrorClass.CLIENT_ERROR, detail, status, exchange=seen)
    # 500/502/504 (or a 3xx that was not followed): the server may have created the job.
    raise SubmitAmbiguous(detail, status, seen)


async def send_lookup(
    client: httpx.AsyncClient, url: str, *, deadline: float, **kwargs: Any
) -> httpx.Response | JobStatus:
    """GET a status/data URL; a failed request becomes a JobStatus (RETRY, RATE_LIMITED,
    NOT_FOUND) instead of an exception, because a failed status check is not a job failure."""
    safe_url = logs.redact(url)
    try:
        response = await asyncio.wait_for(client.get(url, **kwargs), deadline)
    except (TimeoutError, httpx.HTTPError) as exc:
        return JobStatus(Poll.RETRY, detail=f"{type(exc).__name__} from {safe_url}")
    status = response.status_code
    if status == 404:
        return JobStatus(
            Poll.NOT_FOUND, detail=f"HTTP 404 from {safe_url}", exchange=exchange_of(response)
        )
    if status == 429:
        return JobStatus(
            Poll.RATE_LIMITED,
            retry_after=retry_after_of(response),
            detail=f"HTTP 429 {safe_url}",
            exchange=exchange_of(response),
        )
    if status >= 300:
        return JobStatus(
            Poll.RETRY,
            retry_after=retry_after_of(response) if status == 503 else None,
            detail=f"HTTP {status} from {safe_url}: {excerpt(response, 200)}",
            exchange=exchange_of(response),
        )
    return response


class RemoteApiProvider(RemoteProvider):
    """The API-client base of the asynchronous providers. It names RemoteProvider as its base
    so that mypy checks every provider's methods against the protocol."""

    name = "remote"
    remote = True
    handoff = False
    base_url = ""
    request_timeout = 30.0
    _client: httpx.AsyncClient | None = None

    def _client_headers(self) -> dict[str, str]:
        """Headers every API call carries (a credential header where the contract says so)."""
        return {}

    def _http(self) -> httpx.AsyncClient:
        if not self.base_url:
            raise ValueError(f"{self.name}: the provider's API URL is not set")
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers=self._client_headers(),
                timeout=httpx.Timeout(
                    self.request_timeout, connect=min(10.0, self.request_timeout)
                ),
                # Provider endpoints come from settings; proxies from the environment must not
                # silently reroute (and see) credentialed calls.
                trust_env=False,
            )
        return self._client

    async def result_url(self, provider_job_id: str, result_ref: str) -> str:
        """Only a provider that hands results off keeps a result object to link to."""
        raise ResultUnavailable(f"{self.name} keeps no result object of job {provider_job_id}")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def execute_many(self, tasks: list[TaskInput]) -> list[Outcome]:
        """The Provider interface: not how remote jobs run."""
        raise NotImplementedError(f"{self.name} is asynchronous: the worker calls recovery.remote")
