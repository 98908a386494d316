"""A session's client against a server that lies, on aiohttp's path (an HTTPS ``sandbox serve``,
a streamed upload, an error's body): what it reads whole is bounded, what is no JSON is one
``SandboxError``, and the next honest call still works. The socket link's path has its own
(``test_k8s_session_hostile_pod.py``); the server here is plain aiohttp on loopback.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from ironflow import errors
from ironflow.sessions import client
from ironflow.sessions.client import AsyncFiles, RuntimeClient

#: What the server would send of an endless answer, if nobody stopped reading it.
_ENDLESS_BYTES = 256 << 20
_PIECE = b"x" * 65536


@dataclass
class _Server:
    """Answers every request as ``mode`` says; counts what it sent of an endless answer."""

    mode: str = "honest"
    sent: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if self.mode == "honest":
            return web.json_response({"size": 3})
        if self.mode == "not-json":
            return web.Response(body=b"<html>surely not</html>", content_type="application/json")
        if self.mode == "big-json":
            return web.Response(body=b'{"size": 3, "pad": "' + b"p" * 8192 + b'"}', content_type="application/json")
        status = 500 if self.mode == "endless-error" else 200
        response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            while self.sent < _ENDLESS_BYTES:
                await response.write(_PIECE)
                self.sent += len(_PIECE)
        except (ConnectionResetError, RuntimeError):  # the client hung up: what the test wants
            pass
        return response


@pytest.fixture
async def served() -> AsyncIterator[tuple[_Server, RuntimeClient]]:
    server = _Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    runtime = RuntimeClient(headers={}, base_url=f"http://127.0.0.1:{runner.addresses[0][1]}")
    try:
        yield server, runtime
    finally:
        await runtime.aclose()
        await runner.cleanup()


async def _upload(runtime: RuntimeClient) -> int:
    """A file object's upload: streamed, so aiohttp sends it and reads its JSON answer."""
    return await AsyncFiles(runtime).write("f", io.BytesIO(b"abc"))


async def test_a_json_answer_past_its_bound_is_refused(
    served: tuple[_Server, RuntimeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, runtime = served
    assert await _upload(runtime) == 3
    monkeypatch.setattr(client, "MAX_JSON_BYTES", 4096)
    server.mode = "big-json"
    with pytest.raises(errors.SandboxError, match="answered with JSON over 4096 bytes"):
        await _upload(runtime)
    server.mode = "honest"
    assert await _upload(runtime) == 3


async def test_an_endless_json_answer_is_read_no_further_than_its_bound(
    served: tuple[_Server, RuntimeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, runtime = served
    monkeypatch.setattr(client, "MAX_JSON_BYTES", 1 << 20)
    server.mode = "endless"
    with pytest.raises(errors.SandboxError, match="JSON over 1048576 bytes"):
        await _upload(runtime)
    # What a socket's buffers hold beyond the bound, not the 256 MiB the server had for it.
    assert server.sent < 64 << 20, server.sent
    server.mode = "honest"
    assert await _upload(runtime) == 3


async def test_an_answer_that_is_no_json_is_one_sandbox_error(served: tuple[_Server, RuntimeClient]) -> None:
    server, runtime = served
    server.mode = "not-json"
    with pytest.raises(errors.SandboxError, match="answered with a body that is not JSON") as caught:
        await _upload(runtime)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__  # one line, no JSONDecodeError's traceback behind it
    server.mode = "honest"
    assert await _upload(runtime) == 3


async def test_an_endless_error_body_is_read_to_its_bound_and_said_short(
    served: tuple[_Server, RuntimeClient],
) -> None:
    server, runtime = served
    server.mode = "endless-error"
    with pytest.raises(errors.SandboxError) as caught:
        await _upload(runtime)
    assert len(str(caught.value)) < 1000, str(caught.value)[:200]
    assert server.sent < 64 << 20, server.sent
    server.mode = "honest"
    assert await _upload(runtime) == 3
