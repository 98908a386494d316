"""A loopback TCP server for the length of a block: the origins the proxy tests reach."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["serving"]


@contextlib.asynccontextmanager
async def serving(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    host: str = "127.0.0.1",
    *,
    tls: ssl.SSLContext | None = None,
    port: int = 0,
) -> AsyncIterator[int]:
    """``handler`` serves each connection on ``host`` (TLS with ``tls``) until the block ends; yields the port."""
    server = await asyncio.start_server(handler, host, port, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
