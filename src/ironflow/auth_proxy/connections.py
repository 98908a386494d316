"""Client connections under a cap and a header-read deadline: the proxy's slowloris guard.

aiohttp closes a connection idle between requests (``keepalive_timeout``) but has no
deadline for a request's headers and no bound on open connections, so a few hundred
clients trickling bytes hold every file descriptor. :class:`GuardedRunner` serves the
app through :class:`GuardedServer`, which

* refuses a connection past ``max_connections`` with a 503 in the Anthropic error shape
  and closes it at once (its descriptor is freed, no request is read), counting it and
  logging the 1st, 2nd, 4th, 8th… refusal (a flood writes a few lines, not one each);
* closes a connection whose request headers are not complete ``header_timeout_s`` after
  it opened, or after the first byte of its next request on a kept-alive connection.

Hooks into two aiohttp internals (``Server.__call__``, ``RequestHandler``'s ``_waiter``, ``_messages``
and ``_request_in_progress``);
the integration tests exercise both on a real socket, so an aiohttp change shows there.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web, web_protocol

from ironflow.auth_proxy import logs, policy

__all__ = ["TOO_MANY_CONNECTIONS", "GuardedRunner", "GuardedServer", "default_max_connections"]

TOO_MANY_CONNECTIONS: Final = policy.Refusal(
    503,
    "overloaded_error",
    "the auth proxy has too many open connections; retry shortly",
    "connection refused: too many open",
    "too_many_connections",
)
#: Descriptors kept for the listener, logs, the registry and the hub.
_RESERVED_FDS: Final = 64


def default_max_connections() -> int:
    """Half the descriptors this process may still open: a relayed request holds two."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65_536
    return max(1, (soft - _RESERVED_FDS) // 2)


def _refusal_bytes() -> bytes:
    body = TOO_MANY_CONNECTIONS.body()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class _Refuse(asyncio.Protocol):
    """One connection too many: answer 503 without reading, then close."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_refusal_bytes())
        transport.close()


class _GuardedHandler(web_protocol.RequestHandler):
    """aiohttp's protocol plus a deadline on each request's headers."""

    def __init__(self, server: GuardedServer, **kwargs: Any) -> None:
        super().__init__(server, **kwargs)
        self._guard = server
        self._header_deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self._loop.call_later(self._guard.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_late(self) -> None:
        self._header_deadline = None
        # Only a connection still short of a whole request's headers is closed.
        if not self._request_in_progress and not self._messages and self.transport is not None:
            logs.event("connection closed: request headers too slow", logging.WARNING)
            self.force_close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        waiting = self._waiter is not None and not self._waiter.done()
        queued = len(self._messages)
        super().data_received(data)
        if len(self._messages) > queued:
            self._disarm()  # a whole request's headers arrived
        elif waiting and data:
            self._arm()  # the first bytes of the next request on a kept-alive connection

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._guard.open_connections -= 1
        super().connection_lost(exc)


class GuardedServer(web.Server):
    """An aiohttp server that counts its connections and refuses past the cap."""

    def __init__(self, *args: Any, max_connections: int, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open_connections = 0
        self.refused_connections = 0

    def __call__(self) -> Any:  # an asyncio protocol factory: a handler, or the refusal
        if self.open_connections >= self.max_connections:
            self.refused_connections += 1
            refused = self.refused_connections
            if refused & (refused - 1) == 0:  # a power of two
                logs.event(TOO_MANY_CONNECTIONS.event, logging.WARNING, limit=self.max_connections, refused=refused)
            return _Refuse()
        self.open_connections += 1
        return _GuardedHandler(self, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """An :class:`~aiohttp.web.AppRunner` whose server is a :class:`GuardedServer`, calling
    ``handler`` for each request when given (else the app's own)."""

    def __init__(
        self,
        app: web.Application,
        *,
        max_connections: int,
        header_timeout_s: float,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self._max_connections = max_connections
        self._header_timeout_s = header_timeout_s
        self._handler = handler

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()
        return GuardedServer(
            self._handler or plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            max_connections=self._max_connections,
            header_timeout_s=self._header_timeout_s,
            **plain._kwargs,
        )
