"""The proxy under hostile steps and bad days (issue 19), on real sockets on loopback.

Large bodies against a slow upstream, slowloris connections, clients that leave
mid-stream to dodge the output-token limit, a truncated upstream, smuggled hop-by-hop
headers and batch requests past the model allowlist. Traffic is bounded in count and
time; every upstream is a throwaway aiohttp app on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from ironflow.auth_proxy import AuthProxyConfig, Credential, Limits, MemoryRegistry, connections, run_auth_proxy, tokens
from ironflow.auth_proxy.app import HANDLERS_KEY, RunningProxy
from ironflow.secrets import Secret
from ironflow.testing.polling import eventually

ADMIN = "admin-key-" + "h" * 40
OAUTH = "sk-ant-oat01-HOSTILE-TEST-CREDENTIAL"
MESSAGE = {"model": "claude-haiku-5-0", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": ""}]}
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def _upstream(handler: _Handler) -> AsyncIterator[str]:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _token(proxy: RunningProxy, limits: Limits | None = None) -> str:
    async with proxy.admin_client() as admin:
        issued = await admin.issue(
            "run-h", "s", int(time.time()) + 300, credential=Credential("oauth_token", Secret(OAUTH)), limits=limits
        )
    return issued.token.reveal()


def _error(body: bytes) -> tuple[str, str]:
    parsed = json.loads(body)
    assert parsed["type"] == "error"
    return parsed["error"]["type"], parsed["error"]["message"]


# --- item 3: request bodies under one budget ---------------------------------------------------


async def test_bodies_past_the_buffer_budget_get_503_in_the_anthropic_shape() -> None:
    """Four 900 KB bodies held by a slow upstream, budget 2 MiB: two wait upstream, two get 503 at once."""
    release = asyncio.Event()
    arrived = 0

    async def slow(request: web.Request) -> web.Response:
        nonlocal arrived
        await request.read()
        arrived += 1
        await release.wait()
        return web.json_response({"ok": True})

    async with _upstream(slow) as url:
        config = AuthProxyConfig(
            admin_key=Secret(ADMIN), upstream=url, max_body_bytes=1 << 20, max_buffered_bytes=2 << 20
        )
        async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http:
            token = await _token(proxy)
            budget = proxy.app[HANDLERS_KEY].body_budget

            async def post() -> tuple[int, bytes]:
                async with http.post(proxy.url + "/v1/messages", data=b"x" * 900_000,
                                     headers={"x-api-key": token}) as response:  # fmt: skip
                    return response.status, await response.read()

            tasks = [asyncio.create_task(post()) for _ in range(4)]
            await eventually(lambda: arrived == 2 and sum(t.done() for t in tasks) == 2, what="2 held, 2 refused")
            refused = [task.result() for task in tasks if task.done()]
            assert [status for status, _ in refused] == [503, 503]
            assert _error(refused[0][1]) == (
                "overloaded_error",
                "the auth proxy is buffering too many request bodies; retry shortly",
            )
            release.set()
            results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
            assert sorted(status for status, _ in results) == [200, 200, 503, 503]
            assert budget.held == 0


async def test_a_body_arriving_in_pieces_is_relayed_and_a_silent_one_gets_408() -> None:
    """The read deadline is on silence, not on the whole body: pieces 0.2 s apart pass a
    0.5 s deadline; a body that stops short gets 408 and gives its bytes back."""
    received: list[bytes] = []

    async def echo(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response({"ok": True})

    async with _upstream(echo) as url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=url, body_read_timeout_s=0.5)
        async with run_auth_proxy(config) as proxy:
            token = await _token(proxy)
            budget = proxy.app[HANDLERS_KEY].body_budget
            host, port = proxy.url.removeprefix("http://").split(":")
            head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\nContent-Length: 12\r\n\r\n"
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(head.encode())
            for piece in (b"abcd", b"efgh", b"ijkl"):
                writer.write(piece)
                await asyncio.sleep(0.2)
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 200")
            assert received == [b"abcdefghijkl"]
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(head.encode() + b"abcd")  # 8 bytes never come
            started = time.perf_counter()
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = int(answer.lower().partition(b"content-length: ")[2].partition(b"\r\n")[0])
            body = await asyncio.wait_for(reader.readexactly(length), 5)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 408")
            assert _error(body) == (
                "invalid_request_error",
                "request body not received in time",
            )
            assert 0.4 < time.perf_counter() - started < 3
            assert budget.held == 0
            assert len(received) == 1


# --- item 4: slowloris -------------------------------------------------------------------------


async def _read_all(reader: asyncio.StreamReader, limit_s: float) -> bytes:
    async with asyncio.timeout(limit_s):
        return await reader.read()


async def test_slow_headers_are_closed_and_connections_past_the_cap_refused() -> None:
    """Three trickling/silent connections fill a cap of 3: a fourth gets a 503; the three are
    closed after the header timeout, and the proxy serves again."""
    config = AuthProxyConfig(admin_key=Secret(ADMIN), max_connections=3, header_timeout_s=0.5)
    async with run_auth_proxy(config) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        slow = [await asyncio.open_connection(host, int(port)) for _ in range(3)]
        slow[0][1].write(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
        slow[1][1].write(b"GET /healthz HTTP/1.1\r\n")
        await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection(host, int(port))
        refused = await _read_all(reader, 2)
        writer.close()
        assert refused.startswith(b"HTTP/1.1 503")
        assert _error(refused.partition(b"\r\n\r\n")[2])[0] == "overloaded_error"
        started = time.perf_counter()
        for slow_reader, slow_writer in slow:
            assert await _read_all(slow_reader, 3) == b""  # closed by the proxy, nothing answered
            slow_writer.close()
        assert time.perf_counter() - started < 2.5
        async with aiohttp.ClientSession() as http, http.get(proxy.url + "/healthz") as response:
            assert response.status == 200


async def test_kept_alive_connection_is_closed_after_the_idle_timeout() -> None:
    config = AuthProxyConfig(admin_key=Secret(ADMIN), client_idle_timeout_s=0.5)
    async with run_auth_proxy(config) as proxy:
        host, port = proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.perf_counter()
        answer = await _read_all(reader, 3)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200")
        assert time.perf_counter() - started < 2.5


def test_default_connection_cap_leaves_room_for_the_upstream_side() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = connections.default_max_connections()
    assert cap >= 1
    assert cap * 2 < soft or soft == resource.RLIM_INFINITY


# --- item 6: output tokens survive a client that leaves ----------------------------------------


def _sse(event: str, data: dict[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def _answer_then_usage(request: web.Request) -> web.StreamResponse:
    """A stream whose ``message_delta`` (500 output tokens) comes 0.3 s after ``content_block_stop``."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_sse("message_start", {"type": "message_start", "message": {"usage": {"output_tokens": 1}}}))
    await response.write(_sse("content_block_delta", {"type": "content_block_delta", "delta": {"text": "hi"}}))
    await response.write(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    await asyncio.sleep(0.3)
    await response.write(_sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 500}}))
    await response.write(_sse("message_stop", {"type": "message_stop"}))
    await response.write_eof()
    return response


async def _leave_after_block_stop(http: aiohttp.ClientSession, url: str, token: str) -> None:
    async with http.post(url + "/v1/messages", json=MESSAGE, headers={"x-api-key": token}) as response:
        assert response.status == 200
        seen = b""
        while b"content_block_stop" not in seen:
            seen += await response.content.readany()
        response.close()  # the client goes away before message_delta


async def test_a_client_leaving_before_message_delta_is_charged_the_streams_usage() -> None:
    async with _upstream(_answer_then_usage) as url:
        grants = MemoryRegistry()
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=url, registry=grants)
        async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http:
            token = await _token(proxy, Limits(max_output_tokens=400))
            await _leave_after_block_stop(http, proxy.url, token)

            async def charged() -> int:
                return (await grants.take_request(tokens.token_id(token))).output_tokens

            await eventually(lambda: charged(), limit_s=3, what="a charge for the abandoned stream")
            await asyncio.sleep(0.5)  # any later charge has landed too
            assert await charged() == 500
            async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": token}) as r:
                assert r.status == 429


# --- item 13: truncation, hop-by-hop, batches, error shape ---------------------------------------


async def test_a_truncated_upstream_answer_reaches_the_client_truncated() -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_sse("message_start", {"type": "message_start"}))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()  # no chunked terminator: a broken stream
        return response

    async with _upstream(cut) as url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=url, registry=MemoryRegistry())
        async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http:
            token = await _token(proxy)
            async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": token}) as r:
                assert r.status == 200
                with pytest.raises(aiohttp.ClientPayloadError):
                    await r.read()


async def test_headers_named_in_connection_are_not_forwarded_either_way() -> None:
    seen: dict[str, str] = {}

    async def echo(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.Response(text="{}", headers={"Connection": "x-up-hop", "X-Up-Hop": "1", "X-Kept": "1"})

    async with _upstream(echo) as url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=url, registry=MemoryRegistry())
        async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http:
            token = await _token(proxy)
            headers = {"x-api-key": token, "Connection": "keep-alive, X-Down-Hop", "X-Down-Hop": "smuggled"}
            async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers=headers) as response:
                assert response.status == 200
                assert "X-Up-Hop" not in response.headers
                assert response.headers["X-Kept"] == "1"
    assert "X-Down-Hop" not in seen


async def test_batch_requests_are_held_to_the_model_allowlist() -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"id": "batch"})

    def batch(*models: str) -> dict[str, object]:
        return {"requests": [{"custom_id": f"r{i}", "params": {**MESSAGE, "model": m}} for i, m in enumerate(models)]}

    async with _upstream(ok) as url:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=url, registry=MemoryRegistry())
        async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http:
            token = await _token(proxy, Limits(models=("claude-haiku-5-0",)))
            statuses = []
            for body in (batch("claude-haiku-5-0"), batch("claude-haiku-5-0", "claude-opus-5-0"), {"model": "x"}):
                async with http.post(proxy.url + "/v1/messages/batches", json=body,
                                     headers={"x-api-key": token}) as response:  # fmt: skip
                    statuses.append(response.status)
            assert statuses == [200, 403, 403]
