"""The socket link's kept connections (``ironflow.sessions.socket_link``): one the runtime ends is
closed here at once. Before, it stayed half-open until its handle was closed; a handle left open
after its session was closed by the provider (a test that failed midway, a script that forgets)
held a socket, and the collector warned of an unclosed transport.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from tests.fakes.unclosed import unclosed_after_collect

from ironflow.sessions.socket_link import SocketLink
from ironflow.testing.polling import eventually


async def _serve(path: Path) -> web.AppRunner:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, str(path)).start()
    return runner


async def _get(link: SocketLink) -> bytes:
    return b"".join([piece async for piece in link.stream("GET", "/", b"", content_type="application/json")])


async def test_a_kept_connection_the_runtime_ends_is_closed_and_a_dropped_link_holds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runtime.sock"
    runner = await _serve(path)
    link = SocketLink(str(path), {})
    assert await _get(link) == b'{"ok": true}'  # its connection is kept for the next request
    kept = list(link._idle)
    assert len(kept) == 1
    await runner.cleanup()  # the runtime ends: it closes the kept connection

    async def closed_here() -> bool:
        return all(writer.is_closing() for _, writer in kept)

    await eventually(closed_here, what="the kept connection closed on the runtime's end")
    kept.clear()
    del link  # dropped, never closed: as a handle a script forgets
    assert unclosed_after_collect() == []

    runner = await _serve(path)  # a runtime anew at the path: a new link reaches it
    try:
        again = SocketLink(str(path), {})
        assert await _get(again) == b'{"ok": true}'
        await again.aclose()
    finally:
        await runner.cleanup()
