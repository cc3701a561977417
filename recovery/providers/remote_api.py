"""What the asynchronous adapters (messora, tornado, webscraper) share: one lazily opened API
client per provider object, closed by `aclose`, and no `execute_many` (the worker hands their
tasks to recovery.remote instead of running them here).
"""

from __future__ import annotations

import httpx


class RemoteApiProvider:
    name = "remote"
    remote = True
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

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def execute_many(self, tasks):  # the Provider interface: not how remote jobs run
        raise NotImplementedError(f"{self.name} is asynchronous: the worker calls recovery.remote")
