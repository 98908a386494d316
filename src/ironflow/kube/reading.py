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

__all__ = ["MAX_LOG_LINE_BYTES", "LineCutter", "lines", "read_all", "release_stream"]

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


class LineCutter:
    """Lines out of pieces that cut them anywhere (pure). With ``max_line`` (what a pod writes is
    its own), a longer line's first ``max_line`` bytes: the rest of it is dropped as it comes,
    never held."""

    def __init__(self, max_line: int | None = None) -> None:
        self._buffer = bytearray()
        self._max = max_line
        self._dropping = False  # past max_line in the current line: its bytes go until its newline

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` ends (without the newline, or a CR before it)."""
        out: list[bytes] = []
        start = len(self._buffer)
        self._buffer += chunk
        while (cut := self._buffer.find(b"\n", start)) >= 0:
            line = bytes(self._buffer[: cut if self._max is None else min(cut, self._max)])
            del self._buffer[: cut + 1]
            start = 0
            if not self._dropping:
                out.append(line.rstrip(b"\r"))
            self._dropping = False
        if self._max is not None and len(self._buffer) > self._max:
            if not self._dropping:
                out.append(bytes(self._buffer[: self._max]))
            self._dropping = True
            self._buffer.clear()
        return out

    def end(self) -> list[bytes]:
        """The last line, when the body ended without its newline."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        return [rest] if rest and not self._dropping else []


async def lines(resp: aiohttp.ClientResponse, what: str, *, max_line: int | None = None) -> AsyncIterator[bytes]:
    """Split a streamed body into lines of any length (aiohttp's readline caps line length), or,
    with ``max_line`` (a pod's log: the pod writes what it likes), cut as :class:`LineCutter` does."""
    cutter = LineCutter(max_line)
    try:
        while True:
            chunk = await resp.content.readany()
            if not chunk:
                break
            for line in cutter.feed(chunk):
                yield line
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise responses.error_for_status(0, what, message="stream interrupted" + responses.short(exc)) from exc
    for line in cutter.end():
        yield line
