"""Reading the body of an open API answer: whole, or line by line as it streams (aiohttp).

Used by :class:`~ironflow.kube.api.KubeApi` for JSON answers, watches and log follows. A
connection lost mid-body is ``KubeUnavailable`` (status 0), so callers retry or
reconnect; the connection always goes back to the pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import aiohttp

from ironflow.kube import responses

__all__ = ["MAX_LOG_LINE_BYTES", "lines", "read_all", "release_stream"]

#: The longest line of a followed pod log given whole (a step's stream-json result line is far shorter).
MAX_LOG_LINE_BYTES: Final = 16 << 20


async def read_all(resp: aiohttp.ClientResponse, what: str) -> bytes:
    """The whole body of an answer, then the connection back to the pool."""
    try:
        return await resp.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise responses.error_for_status(
            0, what, message="connection lost reading the answer" + responses.short(exc)
        ) from exc
    finally:
        resp.release()


def release_stream(resp: aiohttp.ClientResponse) -> None:
    """Give back a streamed answer's connection; one left before the end of its body is aborted.

    A stream cut mid-body (a watch stopped, a log follow left) cannot go back to the pool, and
    a graceful TLS close of it waits for the server's close_notify: when the event loop ends
    first (a CLI command, a test), Python before 3.12.7 never closes that socket and the
    collector finds it open later. Nothing more will be read from it, so there is nothing to
    shut down gracefully.
    """
    connection = resp.connection
    if connection is not None and not resp.content.at_eof():
        transport = connection.transport
        if transport is not None:
            transport.abort()
    resp.release()


async def lines(resp: aiohttp.ClientResponse, what: str, *, max_line: int | None = None) -> AsyncIterator[bytes]:
    """Split a streamed body into lines of any length (aiohttp's readline caps line length), or,
    with ``max_line`` (a pod's log: the pod writes what it likes), a longer line's first
    ``max_line`` bytes: the rest of it is dropped as it comes, never held."""
    buffer = bytearray()
    dropping = False  # past max_line in the current line: its bytes go until its newline
    try:
        while True:
            chunk = await resp.content.readany()
            if not chunk:
                break
            start = len(buffer)
            buffer += chunk
            while (cut := buffer.find(b"\n", start)) >= 0:
                line = bytes(buffer[: cut if max_line is None else min(cut, max_line)])
                del buffer[: cut + 1]
                start = 0
                if not dropping:
                    yield line.rstrip(b"\r")
                dropping = False
            if max_line is not None and len(buffer) > max_line:
                if not dropping:
                    yield bytes(buffer[:max_line])
                dropping = True
                buffer.clear()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise responses.error_for_status(0, what, message="stream interrupted" + responses.short(exc)) from exc
    if buffer and not dropping:
        yield bytes(buffer)
