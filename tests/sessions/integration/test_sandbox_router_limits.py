"""The router under load and bad bodies (issue 34, L2 and L5), over real bubblewrap sessions: a
per-server session cap answered 429, concurrent closes that all succeed, and a body nested too
deep answered 400, never a 500."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sandbox_router import app as router_app
from ironflow.secrets import Secret

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

TOKEN = "router-limits-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/ironflow/v1/sandboxes"
Serving = Callable[..., AbstractAsyncContextManager[tuple[str, LocalSessions]]]


@pytest.fixture
def serving(state: Path) -> Serving:
    """The application on a free loopback port, with ``build_app``'s keywords."""

    @asynccontextmanager
    async def serve(**options: int) -> AsyncIterator[tuple[str, LocalSessions]]:
        sessions = LocalSessions(LocalSandboxProvider(), state_dir=str(state))
        runner = web.AppRunner(router_app.build_app(sessions, Secret(TOKEN), **options), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}", sessions
        finally:
            await sessions.aclose()
            await runner.cleanup()

    return serve


async def _answer(response: aiohttp.ClientResponse) -> tuple[int, object]:
    async with response:
        return response.status, await response.json()


async def _open(url: str, http: aiohttp.ClientSession) -> tuple[int, object]:
    return await _answer(await http.post(url + API, json={"ttl": 60}, headers=AUTH))


async def _close(url: str, http: aiohttp.ClientSession, sandbox_id: str) -> tuple[int, object]:
    return await _answer(await http.delete(f"{url}{API}/{sandbox_id}", headers=AUTH))


async def test_opening_past_the_cap_is_refused_and_closing_one_frees_a_slot(serving: Serving) -> None:
    async with serving(max_sessions=2) as (url, sessions), aiohttp.ClientSession() as http:
        opened = await asyncio.gather(*(_open(url, http) for _ in range(4)))  # at once: opens under way count
        assert sorted(status for status, _ in opened) == [201, 201, 429, 429]
        refused = next(doc for status, doc in opened if status == 429)
        assert refused == {
            "detail": "this server holds its cap of 2 sessions: close one, "
            "or start `ironflow sandbox serve --max-sessions N`"
        }
        assert len(sessions.held()) == 2
        first = next(doc for status, doc in opened if status == 201)
        assert isinstance(first, dict)
        assert (await _answer(await http.delete(f"{url}{API}/{first['id']}", headers=AUTH)))[0] == 200
        assert (await _open(url, http))[0] == 201
        assert (await _open(url, http))[0] == 429


async def test_many_sessions_closed_at_once_all_answer_200(serving: Serving) -> None:
    async with serving() as (url, sessions), aiohttp.ClientSession() as http:
        ids = []
        for _ in range(30):
            status, doc = await _open(url, http)
            assert status == 201, doc
            assert isinstance(doc, dict)
            ids.append(doc["id"])
        for sandbox_id in ids:  # each session gets the router's pooled client, which a close drops
            routed = await http.get(url + "/", headers={**AUTH, "X-Sandbox-ID": sandbox_id})
            assert (await _answer(routed))[0] == 200
        closed = await asyncio.gather(*(_close(url, http, i) for i in ids))
        assert closed == [(200, {"id": i, "closed": True}) for i in ids]
        assert sessions.held() == []


async def test_a_body_nested_too_deep_is_a_400(serving: Serving) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    async with serving() as (url, sessions), aiohttp.ClientSession() as http:
        headers = {**AUTH, "Content-Type": "application/json"}
        status, doc = await _answer(await http.post(url + API, data=deep, headers=headers))
        assert (status, doc) == (
            400,
            {"detail": "the body nests too deep to decode: keep it a few hundred levels at most"},
        )
        assert sessions.held() == []
