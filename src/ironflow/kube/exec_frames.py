"""The frames of one ``pods/exec`` websocket (``v4.channel.k8s.io``): stdin out, output in (I/O).

Under :meth:`~ironflow.kube.api.KubeApi.exec`, which opens the connection: stdin goes out on
channel 0 (whole at the start, then, for a command that lives on, piece by piece as it comes),
every frame that comes back goes to :class:`~ironflow.kube.responses.ExecOutput` (channels 1
to 3) until the connection ends. Never imports ``kubernetes_asyncio``: the socket is aiohttp's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Final

import aiohttp

from ironflow.kube import responses

__all__ = ["exchange"]

#: The largest stdin frame: a kubelet reads frames whole.
_FRAME: Final = 256 * 1024


async def _feed(ws: aiohttp.ClientWebSocketResponse, pieces: AsyncIterator[bytes]) -> None:
    async for data in pieces:
        for start in range(0, len(data), _FRAME):
            await ws.send_bytes(b"\x00" + data[start : start + _FRAME])


async def exchange(
    ws: aiohttp.ClientWebSocketResponse,
    output: responses.ExecOutput,
    stdin: bytes | None,
    more_stdin: AsyncIterator[bytes] | None,
) -> None:
    """Send ``stdin``, then ``more_stdin`` as it comes, while the output is read to the end."""
    if stdin:
        for start in range(0, len(stdin), _FRAME):
            await ws.send_bytes(b"\x00" + stdin[start : start + _FRAME])
    feeding = None if more_stdin is None else asyncio.create_task(_feed(ws, more_stdin))
    try:
        async for message in ws:
            if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                break
            output.feed(message.data if isinstance(message.data, bytes) else str(message.data).encode())
    finally:
        if feeding is not None:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError, ConnectionError):
                await feeding
