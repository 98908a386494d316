"""``ironflow sandbox serve``'s application over real bubblewrap sessions: the session endpoints,
the upstream router's headers and error answers, the token in front of everything, and bodies
that stream both ways with the raw escaped path kept."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sandbox_router import app as router_app
from ironflow.sandbox_router import protocol
from ironflow.secrets import Secret
from ironflow.sessions import Output
from ironflow.sessions.remote import RemoteSessions

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

TOKEN = "router-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/ironflow/v1/sandboxes"


@pytest.fixture
async def served(state: Path) -> AsyncIterator[tuple[str, LocalSessions]]:
    """The application on a free loopback port, over sessions whose uploads stop at 1 MiB."""
    sessions = LocalSessions(LocalSandboxProvider(), state_dir=str(state), max_upload_bytes=1 << 20)
    runner = web.AppRunner(router_app.build_app(sessions, Secret(TOKEN)), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", sessions
    finally:
        await sessions.aclose()
        await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _open(url: str, http: aiohttp.ClientSession) -> str:
    async with http.post(url + API, json={"ttl": 60}, headers=AUTH) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["id"])


async def _answer(response: aiohttp.ClientResponse) -> tuple[int, object]:
    async with response:
        return response.status, await response.json()


async def test_health_needs_no_token_and_everything_else_does(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession
) -> None:
    url, _ = served
    assert await _answer(await http.get(url + "/healthz")) == (200, {"status": "ok"})
    sandbox_id = await _open(url, http)
    missing = (401, {"detail": "Missing or invalid Authorization header."})
    wrong = (401, {"detail": "Invalid token."})
    for headers, expected in (
        ({}, missing),
        ({"Authorization": f"Basic {TOKEN}"}, missing),
        ({"Authorization": "Bearer"}, missing),
        ({"Authorization": "Bearer wrong"}, wrong),
        ({"Authorization": f"Bearer {TOKEN}x"}, wrong),
    ):
        routed = {**headers, "X-Sandbox-ID": sandbox_id}
        assert await _answer(await http.get(url + API, headers=headers)) == expected
        assert await _answer(await http.post(url + API, json={}, headers=headers)) == expected
        touch = await http.post(url + "/execute", json={"command": "touch pwned"}, headers=routed)
        assert await _answer(touch) == expected
        assert await _answer(await http.delete(f"{url}{API}/{sandbox_id}", headers=headers)) == expected
    check = await http.get(url + "/exists/pwned", headers={**AUTH, "X-Sandbox-ID": sandbox_id})
    assert await _answer(check) == (200, {"path": "pwned", "exists": False}), "no request reached the sandbox"


async def test_the_router_headers_and_their_errors(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession
) -> None:
    url, _ = served
    sandbox_id = await _open(url, http)
    cases = [
        ({}, 400, "X-Sandbox-ID header is required."),
        ({"X-Sandbox-ID": "Not_A_Label"}, 400, "Invalid sandbox ID format."),
        ({"X-Sandbox-ID": "a" * 64}, 400, "Invalid sandbox ID format."),
        ({"X-Sandbox-ID": sandbox_id, "X-Sandbox-Namespace": "Bad NS"}, 400, "Invalid namespace format."),
        ({"X-Sandbox-ID": sandbox_id, "X-Sandbox-Port": "0"}, 400, "Invalid port format."),
        ({"X-Sandbox-ID": sandbox_id, "X-Sandbox-Port": "65536"}, 400, "Invalid port format."),
        ({"X-Sandbox-ID": sandbox_id, "X-Sandbox-Port": "http"}, 400, "Invalid port format."),
        ({"X-Sandbox-ID": "my-sandbox"}, 502, "Could not connect to the backend sandbox: my-sandbox"),
        (
            {"X-Sandbox-ID": "sbx-0000000000000000"},
            502,
            "Could not connect to the backend sandbox: sbx-0000000000000000",
        ),
    ]
    for headers, status, detail in cases:
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
            answer = await http.request(method, url + "/execute", headers={**AUTH, **headers})
            assert await _answer(answer) == (status, {"detail": detail}), (method, headers)
    fine = {"X-Sandbox-ID": sandbox_id, "X-Sandbox-Namespace": "team-a", "X-Sandbox-Port": "8888"}
    for timeout in ("60", "999", "not-a-number", "-1"):  # capped at 180 s, or the cap when unreadable
        answer = await http.get(url + "/", headers={**AUTH, **fine, "X-Sandbox-Timeout": timeout})
        assert await _answer(answer) == (200, {"status": "ok", "message": "Sandbox Runtime is active."})


async def test_a_slow_backend_is_a_504_and_a_closed_one_a_502(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession
) -> None:
    url, _ = served
    sandbox_id = await _open(url, http)
    headers = {**AUTH, "X-Sandbox-ID": sandbox_id, "X-Sandbox-Timeout": "0.3"}
    slow = await http.post(url + "/execute", json={"command": "sleep 3"}, headers=headers)
    assert await _answer(slow) == (504, {"detail": f"Timed out waiting for the backend sandbox: {sandbox_id}"})
    assert await _answer(await http.delete(f"{url}{API}/{sandbox_id}", headers=AUTH)) == (
        200,
        {"id": sandbox_id, "closed": True},
    )
    gone = await http.get(url + "/", headers={**AUTH, "X-Sandbox-ID": sandbox_id})
    assert await _answer(gone) == (502, {"detail": f"Could not connect to the backend sandbox: {sandbox_id}"})


async def test_the_session_endpoints(served: tuple[str, LocalSessions], http: aiohttp.ClientSession) -> None:
    url, sessions = served
    body = {"ttl": "10m", "idle_timeout": 300, "labels": {"team": "a"}, "run_id": "run-1", "env": {"A": "1"}}
    status, doc = await _answer(await http.post(url + API, json=body, headers=AUTH))
    assert status == 201
    assert isinstance(doc, dict)
    sandbox_id = doc["id"]
    assert doc["labels"] == {"team": "a"}
    assert doc["run_id"] == "run-1"
    assert 590 < doc["expires_at"] - time.time() <= 600
    assert [s.id for s in sessions.held()] == [sandbox_id]
    listed = await _answer(await http.get(url + API, headers=AUTH))
    assert listed == (200, {"sandboxes": [doc]})
    assert await _answer(await http.get(f"{url}{API}/{sandbox_id}", headers=AUTH)) == (200, doc)
    echoed = await http.post(
        url + "/execute", json={"command": "printenv A"}, headers={**AUTH, "X-Sandbox-ID": sandbox_id}
    )
    assert (await _answer(echoed))[1]["stdout"] == "1\n"  # type: ignore[index]
    assert (await _answer(await http.delete(f"{url}{API}/{sandbox_id}", headers=AUTH)))[0] == 200
    assert sessions.held() == []
    for method in ("GET", "DELETE"):
        answer = await http.request(method, f"{url}{API}/{sandbox_id}", headers=AUTH)
        assert await _answer(answer) == (404, {"detail": f"no open sandbox '{sandbox_id}'"})


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ([], "the body must be a JSON object"),
        ({"tll": 5}, "unknown field 'tll'"),
        ({"ttl": -1}, "ttl must be a positive number"),
        ({"ttl": True}, "ttl must be a positive number"),
        ({"ttl": "5 parsecs"}, "invalid duration"),
        ({"idle_timeout": 0}, "idle_timeout must be a positive number"),
        ({"labels": {"a": 1}}, "labels must be an object of strings"),
        ({"labels": {"bad key": "v"}}, "label key 'bad key' is not valid"),
        ({"env": ["A=1"]}, "env must be an object of strings"),
        ({"env": {"1A": "x"}}, "invalid env name '1A'"),
        ({"run_id": "no spaces"}, "run_id must be a label value"),
    ],
)
async def test_a_bad_open_request_is_a_400_naming_the_field(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession, body: object, detail: str
) -> None:
    url, sessions = served
    status, doc = await _answer(await http.post(url + API, json=body, headers=AUTH))
    assert status == 400
    assert isinstance(doc, dict)
    assert doc["detail"].startswith(detail)
    assert sessions.held() == []


async def test_a_body_that_is_not_json_is_a_400(served: tuple[str, LocalSessions], http: aiohttp.ClientSession) -> None:
    url, _ = served
    answer = await http.post(url + API, data=b"{", headers=AUTH)
    assert await _answer(answer) == (400, {"detail": "the body must be JSON"})


async def test_bodies_stream_both_ways_and_the_escaped_path_is_kept(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession
) -> None:
    url, _ = served
    sandbox_id = await _open(url, http)
    routed = {**AUTH, "X-Sandbox-ID": sandbox_id}

    async def pieces(count: int) -> AsyncIterator[bytes]:
        for _ in range(count):
            yield b"x" * 65536

    put = await http.put(url + "/ironflow/v1/files/d%2Fbig?mkdir=1", data=pieces(8), headers=routed)  # chunked
    assert await _answer(put) == (200, {"size": 8 * 65536})
    async with http.get(url + "/download/d%2Fbig", headers=routed) as r:
        assert r.status == 200
        assert len(await r.read()) == 8 * 65536
    too_big = await http.put(url + "/ironflow/v1/files/huge", data=pieces(20), headers=routed)
    async with too_big:
        assert too_big.status == 413, "the runtime's limit holds through the router"
    assert await _answer(await http.get(url + "/exists/d%2Fbig", headers=routed)) == (
        200,
        {"path": "d/big", "exists": True},
    )
    assert (await _answer(await http.get(url + "/download/..%2F..%2Fetc%2Fpasswd", headers=routed)))[0] == 403
    async with RemoteSessions(url, token=TOKEN) as remote:
        sandbox = await remote.connect(sandbox_id)
        started = time.monotonic()
        first = None
        async for event in sandbox.commands.stream(["sh", "-c", "echo a; sleep 1.5; echo b"]):
            if isinstance(event, Output) and first is None:
                first = time.monotonic() - started
        assert first is not None
        assert first < 1.2, "the first output came before the command ended"
        await sandbox.disconnect()


def test_only_end_to_end_headers_reach_the_runtime() -> None:
    sent = CIMultiDict(
        [
            ("Authorization", f"Bearer {TOKEN}"),
            ("Connection", "keep-alive, X-Private"),
            ("X-Private", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"),
            ("Host", "router"),
            ("X-Sandbox-ID", "sbx-0000000000000000"),
            ("x-sandbox-pod-ip", "10.0.0.1"),
            ("Content-Type", "application/json"),
            ("X-Request-ID", "r1"),
        ]
    )
    kept = protocol.forwarded(CIMultiDictProxy(sent))
    assert sorted(kept.items()) == [("Content-Type", "application/json"), ("X-Request-ID", "r1")]


async def test_requests_to_a_session_run_concurrently(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession
) -> None:
    url, _ = served
    sandbox_id = await _open(url, http)
    routed = {**AUTH, "X-Sandbox-ID": sandbox_id}

    async def sleep() -> tuple[int, object]:
        return await _answer(await http.post(url + "/execute", json={"command": "sleep 0.5"}, headers=routed))

    started = time.monotonic()
    answers = await asyncio.gather(*(sleep() for _ in range(4)))
    assert [status for status, _ in answers] == [200] * 4
    assert time.monotonic() - started < 1.9, "four half-second commands ran side by side"


async def test_an_upload_refused_midway_is_a_413_every_time(
    served: tuple[str, LocalSessions], http: aiohttp.ClientSession
) -> None:
    """The runtime answers 413 while the body still streams in: the router must see that answer,
    not a connection broken by the bytes the runtime left unread (then it said 502)."""
    url, _ = served
    routed = {**AUTH, "X-Sandbox-ID": await _open(url, http)}

    async def pieces() -> AsyncIterator[bytes]:
        for _ in range(64):  # 4 MiB against the 1 MiB limit
            yield b"x" * 65536

    statuses = []
    for _ in range(10):
        async with http.put(url + "/ironflow/v1/files/huge", data=pieces(), headers=routed) as refused:
            statuses.append(refused.status)
    assert statuses == [413] * 10
