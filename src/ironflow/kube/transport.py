"""One request to the Kubernetes API and its answer: the transport under :class:`~ironflow.kube.api.KubeApi`.

Sends through the client's ``call_api`` (raw JSON, every resource the same way), counts
the request by verb, maps a non-2xx answer to its :mod:`ironflow.errors` class, and sends
again only when the server did not act: after a 401 once with fresh credentials (an exec
plugin's short-lived token, a rotated token file), after a 429 as ``Retry-After`` says.
It holds the client but never imports ``kubernetes_asyncio``: the client is duck-typed.
"""

from __future__ import annotations

import asyncio
import json as json_module
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import aiohttp

from ironflow import errors
from ironflow.kube import reading, responses
from ironflow.kube.resources import KubeObject, RequestCounters
from ironflow.kube.responses import error_for_status, retry_after_delay

__all__ = ["ApiClient", "Transport"]

#: Times a throttled (429) request is sent again before the error surfaces.
_THROTTLE_RETRIES: Final = 3


class ApiClient(Protocol):
    """What the transport uses of ``kubernetes_asyncio``'s ``ApiClient``."""

    configuration: Any

    async def call_api(self, *args: Any, **kwargs: Any) -> Any: ...


class Transport:
    """Requests of one client; ``fresh_token`` reloads the cluster's bearer token after a 401."""

    def __init__(
        self,
        client: ApiClient,
        *,
        counters: RequestCounters,
        request_timeout_s: float,
        fresh_token: Callable[[], Awaitable[str | None]],
    ) -> None:
        self._client = client
        self._counters = counters
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=10)
        self._fresh_token = fresh_token
        self._refreshing = asyncio.Lock()

    async def _refresh(self, used: object) -> bool:
        """After a 401, load the cluster's credentials again and say whether they changed.
        Concurrent 401s reload once."""
        keys = self._client.configuration.api_key
        async with self._refreshing:
            if keys.get("BearerToken") != used:
                return True  # another request already refreshed it
            token = await self._fresh_token()
            if not token or token == used:
                return False
            keys["BearerToken"] = token
            return True

    async def open(
        self,
        verb: str,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: object = None,
        content_type: str = "application/json",
        read_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the open response, raising the mapped error on non-2xx."""
        refreshed, throttled = False, 0
        while True:
            self._counters.by_verb[verb] += 1
            used = self._client.configuration.api_key.get("BearerToken")
            try:
                resp: aiohttp.ClientResponse = await self._client.call_api(
                    path,
                    method,
                    query_params=list(query or []),
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=read_timeout or self._timeout,
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise error_for_status(0, what, message=type(exc).__name__ + responses.short(exc)) from exc
            # 401 and 429 mean the request was not acted on, so sending it again is safe.
            if resp.status == 401 and not refreshed:
                resp.release()  # an expired token (exec plugin, rotated file): load it again, once
                refreshed = True
                if not await self._refresh(used):
                    raise error_for_status(
                        401, what, reason="Unauthorized", message="the cluster's credentials were refused"
                    )
                continue
            if resp.status == 429 and throttled < _THROTTLE_RETRIES:
                delay = retry_after_delay(resp.headers.get("Retry-After"), throttled)
                throttled += 1
                resp.release()  # API priority and fairness: wait as told, like client-go
                await asyncio.sleep(delay)
                continue
            break
        if not 200 <= resp.status < 300:
            try:
                raw = await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError):
                raw = b""
            finally:
                resp.release()
            reason, message = responses.status_message(raw)
            raise error_for_status(resp.status, what, reason=reason or str(resp.reason or ""), message=message)
        return resp

    async def json(
        self,
        verb: str,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: object = None,
        content_type: str = "application/json",
    ) -> KubeObject:
        resp = await self.open(verb, method, path, what, query=query, body=body, content_type=content_type)
        raw = await reading.read_all(resp, what)
        try:
            data = json_module.loads(raw)
        except ValueError as exc:
            raise errors.KubernetesError(f"{what}: the API answered with invalid JSON", status=resp.status) from exc
        if not isinstance(data, dict):
            raise errors.KubernetesError(f"{what}: the API answered with a non-object", status=resp.status)
        return data
