"""The PostgreSQL registry on bad days: a silently cut LISTEN link, forged rows, corrupt
limits, abandoned streams, and ``rotate-keys`` with the wrong key; real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest

from ironflow.auth_proxy import AuthProxyConfig, Credential, KeyRing, Limits, run_auth_proxy, tokens
from ironflow.auth_proxy.app import RunningProxy
from ironflow.auth_proxy.postgres import PostgresRegistry, rotate_keys
from ironflow.fake_model.server import FakeAnthropic, Script, TextTurn, Usage
from ironflow.secrets import Secret

pytestmark = pytest.mark.postgres

ADMIN = "admin-key-" + "q" * 40
KEY1 = "1:" + "ab" * 32
OTHER_KEY1 = "1:" + "ef" * 32
OAUTH = "sk-ant-oat01-PG-HOSTILE-CREDENTIAL"
MESSAGE = {"model": "claude-haiku-5-0", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def dsn(postgres_database: str) -> str:
    return postgres_database


def _config(dsn: str, upstream: str, **kw: object) -> AuthProxyConfig:
    return AuthProxyConfig(
        admin_key=Secret(ADMIN), upstream=upstream, database_url=Secret(dsn), key_ring=KeyRing.from_spec(KEY1),
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


async def _issue(proxy: RunningProxy, limits: Limits | None = None) -> tuple[str, str]:
    async with proxy.admin_client() as admin:
        issued = await admin.issue(
            "run-q", "s", int(time.time()) + 300, credential=Credential("oauth_token", Secret(OAUTH)), limits=limits
        )
    return issued.id, issued.token.reveal()


async def _post(http: aiohttp.ClientSession, proxy: RunningProxy, token: str) -> tuple[int, dict[str, object]]:
    async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": token}) as response:
        body = await response.read()
        return response.status, (await response.json(content_type=None)) if body.startswith(b"{") else {}


@contextlib.asynccontextmanager
async def _stopped_listener(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """SIGSTOP the backend serving the proxy's LISTEN: the link stays open, nothing answers."""
    conn = await asyncpg.connect(dsn)
    pids = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()"
    )
    assert pids
    for row in pids:
        os.kill(row["pid"], signal.SIGSTOP)
    try:
        yield conn
    finally:
        for row in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(row["pid"], signal.SIGCONT)
        await conn.close()


async def test_a_silently_cut_listen_link_stops_the_cache_within_the_keepalive(dsn: str) -> None:
    """No FIN, no termination callback: the keep-alive notices and the cache is not trusted."""
    async with FakeAnthropic() as fake:
        config = _config(dsn, fake.url, listen_keepalive_s=0.3)
        async with run_auth_proxy(config) as proxy, aiohttp.ClientSession() as http:
            grant_id, token = await _issue(proxy)
            assert (await _post(http, proxy, token))[0] == 200  # now cached
            async with _stopped_listener(dsn) as conn:
                # Revoked behind the replica's back: its NOTIFY cannot reach the stopped backend.
                await conn.execute("DELETE FROM ironflow.auth_proxy_grants WHERE id = $1", grant_id)
                started = time.perf_counter()
                while (await _post(http, proxy, token))[0] != 401:
                    assert time.perf_counter() - started < 3.0, "a revoked token was relayed from the cache"
                    await asyncio.sleep(0.05)


async def test_a_ciphertext_copied_into_a_forged_row_is_never_relayed(dsn: str) -> None:
    async with FakeAnthropic() as fake, run_auth_proxy(_config(dsn, fake.url)) as proxy:
        grant_id, _ = await _issue(proxy)
        forged = tokens.new_token().reveal()
        conn = await asyncpg.connect(dsn)
        try:
            for new_id, kind in ((tokens.token_id(forged), "oauth_token"), (grant_id + "-k", "api_key")):
                await conn.execute(
                    "INSERT INTO ironflow.auth_proxy_grants (id, run_id, step, expires_at, credential_kind,"
                    " encrypted_credential, nonce, key_version, seal_format)"
                    " SELECT $1, run_id, step, $2, $3, encrypted_credential, nonce, key_version, seal_format"
                    " FROM ironflow.auth_proxy_grants WHERE id = $4",
                    new_id, int(time.time()) + 365 * 86400, kind, grant_id,
                )  # fmt: skip
            await conn.execute(
                "UPDATE ironflow.auth_proxy_grants SET credential_kind = 'api_key' WHERE id = $1", grant_id
            )
        finally:
            await conn.close()
        async with aiohttp.ClientSession() as http:
            status, body = await _post(http, proxy, forged)
        assert status == 503
        assert body["error"] == {"type": "api_error", "message": "auth proxy token registry unavailable"}
        assert fake.requests == []


async def test_rows_sealed_without_associated_data_are_resealed_at_open(dsn: str) -> None:
    ring = KeyRing.from_spec(KEY1)
    opened = await PostgresRegistry.open(Secret(dsn), ring)
    token = tokens.new_token().reveal()
    grant = tokens.Grant(
        tokens.token_id(token), "r", "s", int(time.time()) + 300, tokens.ClaudeCredential("api_key", Secret(OAUTH))
    )
    try:
        await opened.insert(grant)
        legacy = ring.seal(OAUTH.encode(), None)  # what the registry wrote before migration 0004
        await opened._pool.execute(
            "UPDATE ironflow.auth_proxy_grants SET encrypted_credential = $2, nonce = $3, seal_format = 0"
            " WHERE id = $1",
            grant.id, legacy.ciphertext, legacy.nonce,
        )  # fmt: skip
    finally:
        await opened.close()
    reopened = await PostgresRegistry.open(Secret(dsn), ring)
    try:
        assert await reopened.resolve(grant.id, int(time.time())) == grant
        assert await reopened._pool.fetchval("SELECT min(seal_format) FROM ironflow.auth_proxy_grants") == 1
    finally:
        await reopened.close()


async def test_a_corrupt_limits_row_answers_503_in_the_anthropic_shape(dsn: str) -> None:
    async with FakeAnthropic() as fake, run_auth_proxy(_config(dsn, fake.url)) as proxy:
        grant_id, token = await _issue(proxy, Limits(max_requests=5))
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                'UPDATE ironflow.auth_proxy_grants SET limits = \'{"max_requests": "many"}\' WHERE id = $1', grant_id
            )
        finally:
            await conn.close()
        async with aiohttp.ClientSession() as http:
            status, body = await _post(http, proxy, token)
        assert status == 503
        assert body["type"] == "error"
        assert fake.requests == []


async def test_output_tokens_of_answers_whose_client_leaves_at_the_end_are_counted(dsn: str) -> None:
    """Clients that close as the stream ends cannot run past ``max_output_tokens``."""
    turn = TextTurn("a long answer", usage=Usage(3, 500))
    async with (
        FakeAnthropic(Script.of(default=turn)) as fake,
        run_auth_proxy(_config(dsn, fake.url)) as proxy,
        aiohttp.ClientSession() as http,
    ):
        _, token = await _issue(proxy, Limits(max_output_tokens=1000))
        statuses = []
        for _ in range(4):
            async with http.post(proxy.url + "/v1/messages", json={**MESSAGE, "stream": True},
                                 headers={"x-api-key": token}) as response:  # fmt: skip
                statuses.append(response.status)
                if response.status == 200:
                    while b"message_stop" not in await response.content.readany():
                        pass
                response.close()
            await asyncio.sleep(0.3)
        assert statuses == [200, 200, 429, 429]


async def test_rotate_keys_names_a_wrong_key_as_such(dsn: str) -> None:
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    token = tokens.new_token().reveal()
    try:
        await opened.insert(
            tokens.Grant(tokens.token_id(token), "r", "s", int(time.time()) + 60,
                         tokens.ClaudeCredential("api_key", Secret(OAUTH)))
        )  # fmt: skip
    finally:
        await opened.close()
    report = await rotate_keys(Secret(dsn), KeyRing.from_spec(f"{OTHER_KEY1},2:" + "cd" * 32))
    assert (report.resealed, report.broken, report.missing_key) == (0, 1, 0)
