"""A run's egress policy changed while it runs (``PUT /admin/v1/runs/{run}/egress``): the next
connection of its tokens is decided by the new policy, on every replica (PostgreSQL's NOTIFY, the
same path as revocation, measured under 1 s), in one process and across a hub's workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.loopback import serving

from ironflow import egress
from ironflow.auth_proxy import AdminClient, AuthProxyConfig, Credential, KeyRing, hub, registry, run_auth_proxy, tokens
from ironflow.auth_proxy.app import RunningProxy
from ironflow.errors import AuthProxyError
from ironflow.secrets import Secret
from ironflow.testing.postgres_server import fresh_database

ADMIN = "admin-key-" + "l" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "q" * 20))
HELLO = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"


@contextlib.asynccontextmanager
async def _origin() -> AsyncIterator[int]:
    """A loopback HTTP server answering ``hello``; its port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HELLO)
            await writer.drain()
        writer.close()

    async with serving(serve) as port:
        yield port


async def _get(proxy: RunningProxy, token: str, port: int) -> int:
    """A plain-HTTP GET through the egress proxy: the status line's code."""
    assert proxy.egress is not None
    host, _, proxy_port = proxy.egress.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(proxy_port))
    writer.write(
        f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Proxy-Authorization: Bearer {token}\r\n\r\n".encode()
    )
    try:
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    return int(answer.split(b" ", 2)[1])


def _allow(port: int) -> egress.EgressPolicy:
    return egress.EgressPolicy(allow=(egress.parse_allow_host(f"127.0.0.1:{port}"),))


def _config(database_url: Secret | None = None, key_ring: KeyRing | None = None) -> AuthProxyConfig:
    return AuthProxyConfig(
        admin_key=Secret(ADMIN), upstream="http://127.0.0.1:9", egress_host="127.0.0.1", egress_port=0,
        database_url=database_url, key_ring=key_ring,
    )  # fmt: skip


async def _issue(admin: AdminClient, step: str, policy: egress.EgressPolicy) -> str:
    issued = await admin.issue("run-live", step, int(time.time()) + 600, credential=CREDENTIAL, egress=policy)
    return issued.token.reveal()


async def test_a_changed_policy_decides_the_next_connection_of_the_runs_tokens_and_only_the_named_steps() -> None:
    async with (
        _origin() as first,
        _origin() as second,
        run_auth_proxy(_config()) as proxy,
        proxy.admin_client() as admin,
    ):
        build = await _issue(admin, "build", _allow(first))
        test = await _issue(admin, "test", _allow(first))
        other = (await admin.issue("run-other", "build", int(time.time()) + 600, credential=CREDENTIAL,
                                   egress=_allow(first))).token.reveal()  # fmt: skip
        assert [await _get(proxy, t, first) for t in (build, test, other)] == [200, 200, 200]
        assert await admin.set_egress("run-live", _allow(second), step="test") == 1
        assert (await _get(proxy, test, first), await _get(proxy, test, second)) == (403, 200)
        assert await _get(proxy, build, first) == 200  # another step of the run: unchanged
        assert await admin.set_egress("run-live", None) == 2  # the whole run: nothing passes
        assert [await _get(proxy, t, p) for t in (build, test) for p in (first, second)] == [403] * 4
        assert await _get(proxy, other, first) == 200  # another run: unchanged
        assert await admin.set_egress("run-live", _allow(first)) == 2  # a closed policy opens again
        assert [await _get(proxy, t, first) for t in (build, test)] == [200, 200]
        claude_only = await admin.issue("run-live", "build", int(time.time()) + 600, credential=CREDENTIAL)
        assert await admin.set_egress("run-live", _allow(second)) == 2  # never a token without a policy
        assert await _get(proxy, claude_only.token.reveal(), second) == 403
        assert await admin.set_egress("no-such-run", _allow(first)) == 0


async def test_a_bad_change_is_a_400_naming_it_and_changes_nothing() -> None:
    async with _origin() as port, run_auth_proxy(_config()) as proxy, proxy.admin_client() as admin:
        token = await _issue(admin, "build", _allow(port))
        for body, message in (
            ({"egress": {"allow": ["*.*.bad"]}}, "invalid egress policy: "),
            ({"policy": {}}, 'invalid egress change body: expected {"egress": policy or null'),
            ({"egress": None, "step": 3}, "invalid egress change body: step must be a step name"),
        ):
            status, text = await admin._call("PUT", "/admin/v1/runs/run-live/egress", body)
            assert status == 400
            assert json.loads(text)["error"]["message"].startswith(message)
        assert await _get(proxy, token, port) == 200
        async with AdminClient(proxy.url, "wrong-" + ADMIN) as stranger:
            with pytest.raises(AuthProxyError):
                await stranger.set_egress("run-live", None)
        assert await _get(proxy, token, port) == 200


@pytest.mark.postgres
async def test_a_change_on_one_replica_reaches_the_other_within_a_second(postgres_dsn: str) -> None:
    """Two replicas on one database, each caching the grant; the change is made on the first and
    the second's next connection is decided by it within 1 s (measured, as revocation's)."""
    async with fresh_database(postgres_dsn) as dsn, _origin() as first, _origin() as second:
        config = _config(database_url=Secret(dsn), key_ring=KeyRing.from_spec("1:" + "ef" * 32))
        async with run_auth_proxy(config) as one, run_auth_proxy(config) as two, one.admin_client() as admin:
            token = await _issue(admin, "build", _allow(first))
            assert await _get(two, token, first) == 200
            assert await _get(two, token, first) == 200  # now served from the second replica's cache
            started = time.perf_counter()
            assert await admin.set_egress("run-live", _allow(second)) == 1
            while await _get(two, token, first) != 403:
                assert time.perf_counter() - started < 1.0, "the change did not reach the other replica within 1 s"
                await asyncio.sleep(0.005)
            print(f"egress change seen by the other replica after {(time.perf_counter() - started) * 1000:.1f} ms")
            assert await _get(two, token, second) == 200
            assert await _get(one, token, first) == 403


async def test_a_change_through_one_hub_worker_evicts_every_workers_cached_grant(tmp_path: Path) -> None:
    async with hub.serve_hub(str(tmp_path / "hub" / "registry.sock")) as socket_path:
        workers = [hub.HubRegistry(socket_path), hub.HubRegistry(socket_path)]
        try:
            grant, _ = await registry.issue(
                workers[0],
                tokens.TokenRequest("run-live", "build", int(time.time()) + 600,
                                    tokens.ClaudeCredential("api_key", Secret("sk-ant-hub")), egress=_allow(1)),
            )  # fmt: skip
            for worker in workers:  # both cache it
                found = await worker.resolve(grant.id, int(time.time()))
                assert isinstance(found, tokens.Grant)
                assert found.egress == _allow(1)
            assert await workers[0].set_egress("run-live", None, _allow(2)) == 1
            await asyncio.sleep(0.05)  # the announcement is in the other worker's socket before the answer
            for worker in workers:
                found = await worker.resolve(grant.id, int(time.time()))
                assert isinstance(found, tokens.Grant)
                assert found.egress == _allow(2)
        finally:
            for worker in workers:
                await worker.close()
