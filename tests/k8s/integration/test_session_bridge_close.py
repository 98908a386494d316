"""A Kubernetes session's bridge (``ironflow.k8s.sessions.bridge``) closes with nothing of it left
running: a request it cuts short ends its exec first, even when that takes longer than the second
aiohttp gives a request to finish. Before, ``aclose`` returned while such a request still ran,
and a test's check for leaked tasks found it now and then under load.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from ironflow.k8s.sessions.bridge import Bridge
from ironflow.sessions.socket_link import SocketLink

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _SlowToEnd:
    """A pod runtime whose answer goes on until cut, and whose exec then takes a while to end
    (a close through the apiserver on a loaded machine)."""

    def __init__(self) -> None:
        self.ended = asyncio.Event()

    async def request(self, method: str, target: str, body: bytes, sink: Callable[[bytes], None], **kwargs: Any) -> Any:
        sink(_HEAD + b"5\r\nfirst\r\n")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(1.5)  # past the second the bridge's server waits for a request
            self.ended.set()
            raise


async def _answer(link: SocketLink) -> AsyncGenerator[bytes, None]:
    async for piece in link.stream("GET", "/files/big", b"", content_type="application/json"):
        yield piece


async def test_a_bridge_closes_only_once_the_requests_it_cut_short_have_ended() -> None:
    runtime = _SlowToEnd()
    bridge = Bridge(runtime, "sbx-0123456789abcdef", env={}, max_upload_bytes=1 << 20)  # type: ignore[arg-type]
    await bridge.start()
    link = SocketLink(bridge.socket_path, {"Authorization": f"Bearer {bridge.token.reveal()}"})
    pieces = _answer(link)
    try:
        assert await anext(pieces) == b"first"  # the request is under way
        await bridge.aclose()
        assert runtime.ended.is_set()  # its exec ended before the close returned
        handling = [t for t in asyncio.all_tasks() if not t.done() and "_handle_request" in repr(t.get_coro())]
        assert handling == []
    finally:
        with contextlib.suppress(Exception):
            await pieces.aclose()
        await link.aclose()
