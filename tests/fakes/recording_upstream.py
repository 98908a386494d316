"""An HTTP server on loopback that answers every request ``200 {"ok": true}`` and records what it got.

It stands for the hosts a relay reaches (the proxy's ``secret_upstream`` sends ``/r/<host>/…`` to
``<url>/<host>/…``): a test reads back each request's method, path, raw query and headers to see what
the proxy injected and that nothing else left.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web

__all__ = ["RecordingUpstream", "Seen", "recording_upstream"]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: str  # raw, as sent
    headers: tuple[tuple[str, str], ...]


@dataclass
class RecordingUpstream:
    url: str = ""
    seen: list[Seen] = field(default_factory=list)


@contextlib.asynccontextmanager
async def recording_upstream() -> AsyncIterator[RecordingUpstream]:
    recorded = RecordingUpstream()

    async def record(request: web.Request) -> web.Response:
        headers = tuple(request.headers.items())
        recorded.seen.append(Seen(request.method, request.path, request.rel_url.raw_query_string, headers))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    recorded.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield recorded
    finally:
        await runner.cleanup()
