"""Egress-only tokens issued through the admin API (a pod's ``HTTPS_PROXY`` password), on the
in-memory registry and on PostgreSQL: they open what their policy allows on the egress proxy, the
model and secret relays refuse them (rows 5b and S1b: 403), a live policy change reaches them, and
a step's or a run's revocation takes them with the rest. In PostgreSQL such a grant is a row of
kind ``egress`` with an empty sealed value and always a policy.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from tests.auth_proxy.integration.test_egress_live_policy import _allow, _get, _origin

from ironflow import egress
from ironflow.auth_proxy import (
    AdminClient,
    AuthProxyConfig,
    Credential,
    KeyRing,
    crypto,
    hub,
    postgres,
    registry,
    run_auth_proxy,
    tokens,
)
from ironflow.auth_proxy.app import RunningProxy
from ironflow.auth_proxy.postgres import PostgresRegistry
from ironflow.errors import AuthProxyError
from ironflow.secrets import Secret
from ironflow.testing.polling import eventually
from ironflow.testing.postgres_server import fresh_database

ADMIN = "admin-key-" + "o" * 40
CLAUDE = Credential("api_key", Secret("sk-ant-api03-" + "z" * 20))
RING = "1:" + "9a" * 32
EGRESS_ONLY = tokens.EgressCredential()


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def proxy(request: pytest.FixtureRequest) -> AsyncIterator[RunningProxy]:
    """The auth proxy with its egress listener, on the in-memory registry or a fresh PostgreSQL database."""
    async with contextlib.AsyncExitStack() as stack:
        url = ring = None
        if request.param == "postgres":
            url = Secret(await stack.enter_async_context(fresh_database(request.getfixturevalue("postgres_dsn"))))
            ring = KeyRing.from_spec(RING)
        config = AuthProxyConfig(
            admin_key=Secret(ADMIN), upstream="http://127.0.0.1:9", egress_host="127.0.0.1", egress_port=0,
            database_url=url, key_ring=ring,
        )  # fmt: skip
        yield await stack.enter_async_context(run_auth_proxy(config))


async def _relayed(proxy: RunningProxy, token: str, path: str) -> tuple[int, str]:
    """A request to the model or secret relay with ``token``: its status and error message."""
    body = {"model": "claude-haiku-5-0", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.url + path, json=body, headers={"Authorization": f"Bearer {token}"}) as answer,
    ):
        return answer.status, json.loads(await answer.text())["error"]["message"]


async def test_an_egress_only_token_reaches_its_policy_and_nothing_else_and_goes_with_the_step(
    proxy: RunningProxy,
) -> None:
    async with _origin() as first, _origin() as second, proxy.admin_client() as admin:
        expires = int(time.time()) + 600
        issued = await admin.issue("run-e", "build", expires, credential=EGRESS_ONLY, egress=_allow(first))
        claude = await admin.issue("run-e", "build", expires, credential=CLAUDE)
        token = issued.token.reveal()
        assert (await _get(proxy, token, first), await _get(proxy, token, second)) == (200, 403)
        kept = [
            f"egress allowed 127.0.0.1:{first} (GET): allowed by allow 127.0.0.1:{first}",
            f"egress denied 127.0.0.1:{second} (GET): 127.0.0.1 is loopback: only a rule naming it opens it",
        ]  # for the step's record, kept off the request's path: read as soon as both are there
        assert await eventually(lambda: _notes_are(admin, issued.id, kept), what="the kept decisions")
        assert await _get(proxy, claude.token.reveal(), first) == 403  # the model's token opens no egress
        for path in ("/v1/messages", "/r/github.com/org/repo.git/info/refs"):
            assert await _relayed(proxy, token, path) == (403, "this token only reaches the egress proxy")
        assert await admin.set_egress("run-e", _allow(second)) == 1  # the egress token only: the Claude one has none
        assert (await _get(proxy, token, first), await _get(proxy, token, second)) == (403, 200)
        assert await admin.revoke(issued.id) is True  # the step's end
        assert await _get(proxy, token, second) == 407
        assert await admin.egress_notes(issued.id) == []  # gone with the grant
        again = await admin.issue("run-e", "test", expires, credential=EGRESS_ONLY, egress=_allow(first))
        assert await admin.revoke_run("run-e") == 2  # the run's release: the new egress token and the Claude one
        assert await _get(proxy, again.token.reveal(), first) == 407


async def _notes_are(admin: AdminClient, token_id: str, lines: list[str]) -> bool:
    return await admin.egress_notes(token_id) == lines


@pytest.mark.postgres
async def test_postgresql_keeps_the_last_decisions_of_a_live_grant_for_every_replica(postgres_dsn: str) -> None:
    policy = egress.EgressPolicy.from_json({"allow": ["pypi.org:443"]})
    grant = tokens.Grant(tokens.token_id("ifap_n"), "r", "s", int(time.time()) + 60, EGRESS_ONLY, egress=policy)
    async with fresh_database(postgres_dsn) as url:
        one = await PostgresRegistry.open(Secret(url), KeyRing.from_spec(RING))
        two = await PostgresRegistry.open(Secret(url), KeyRing.from_spec(RING))
        try:
            await one.note_egress(grant.id, "before the grant")  # nothing to keep it with
            await one.insert(grant)
            for n in range(registry.EGRESS_NOTES_KEPT + 5):
                await (one if n % 2 else two).note_egress(grant.id, f"decision {n}")
            kept = await two.egress_notes(grant.id)
            assert kept == [f"decision {n}" for n in range(5, registry.EGRESS_NOTES_KEPT + 5)]
            assert await one.egress_notes(grant.id) == kept
            await one.revoke(grant.id)
            assert await two.egress_notes(grant.id) == []
        finally:
            await one.close()
            await two.close()


async def test_the_hub_keeps_a_grants_decisions_for_every_worker(tmp_path: Path) -> None:
    policy = egress.EgressPolicy.from_json({"allow": ["pypi.org:443"]})
    grant = tokens.Grant(tokens.token_id("ifap_h"), "r", "s", int(time.time()) + 60, EGRESS_ONLY, egress=policy)
    async with hub.serve_hub(str(tmp_path / "hub" / "registry.sock")) as socket_path:
        workers = [hub.HubRegistry(socket_path), hub.HubRegistry(socket_path)]
        try:
            await workers[0].insert(grant)
            await workers[0].note_egress(
                grant.id, "egress denied a.example:443 (CONNECT): no rule allows a.example:443"
            )
            await workers[1].note_egress(
                grant.id, "egress allowed pypi.org:443 (CONNECT): allowed by allow pypi.org:443"
            )
            assert [line.split(" ", 2)[1] for line in await workers[1].egress_notes(grant.id)] == ["denied", "allowed"]
            await workers[1].revoke(grant.id)
            assert await workers[0].egress_notes(grant.id) == []
        finally:
            for worker in workers:
                await worker.close()


@pytest.mark.parametrize(
    ("credential", "policy", "message"),
    [
        ({"kind": "egress"}, None, "an egress-only credential needs an egress policy"),
        ({"kind": "egress", "value": "x"}, {"allow": ["pypi.org"]}, "invalid token request body"),
        ({"kind": "egress", "hosts": ["pypi.org"]}, {"allow": ["pypi.org"]}, "invalid token request body"),
    ],
)
async def test_an_egress_only_request_without_a_policy_or_with_a_value_is_a_400(
    proxy: RunningProxy, credential: dict[str, object], policy: dict[str, object] | None, message: str
) -> None:
    body: dict[str, object] = {
        "run_id": "r",
        "step": "s",
        "expires_at": int(time.time()) + 60,
        "credential": credential,
    }
    if policy is not None:
        body["egress"] = policy
    async with proxy.admin_client() as admin:
        status, text = await admin._call("POST", "/admin/v1/tokens", body)
        with pytest.raises(AuthProxyError, match="needs an egress policy"):
            await admin.issue("r", "s", int(time.time()) + 60, credential=EGRESS_ONLY)
    assert (status, json.loads(text)["error"]["message"]) == (400, message)


@pytest.mark.postgres
async def test_postgresql_keeps_an_egress_only_grant_as_a_valueless_row_with_its_policy(postgres_dsn: str) -> None:
    policy = egress.EgressPolicy.from_json({"allow": ["pypi.org:443", "svc.ns:80@10.96.0.0/12"]})
    grant = tokens.Grant(tokens.token_id("ifap_e"), "r", "s", int(time.time()) + 60, EGRESS_ONLY, egress=policy)
    bare = tokens.Grant(tokens.token_id("ifap_f"), "r", "s", int(time.time()) + 60, EGRESS_ONLY)
    async with fresh_database(postgres_dsn) as url:
        grants = await PostgresRegistry.open(Secret(url), KeyRing.from_spec(RING), cache_ttl_s=0)
        try:
            await grants.insert(grant)
            with pytest.raises(registry.RegistryUnavailable, match="without a policy"):
                await grants.insert(bare)
            assert await grants.resolve(grant.id, int(time.time())) == grant
            conn = await asyncpg.connect(url)
            try:
                row = await conn.fetchrow(
                    "SELECT credential_kind, secret_spec, length(encrypted_credential) AS sealed"
                    " FROM ironflow.auth_proxy_grants WHERE id = $1",
                    grant.id,
                )
                assert (row["credential_kind"], row["secret_spec"], row["sealed"]) == ("egress", None, 16)  # a tag only
                with pytest.raises(asyncpg.CheckViolationError):  # the table refuses a policy-less one too
                    await conn.execute("UPDATE ironflow.auth_proxy_grants SET egress = NULL WHERE id = $1", grant.id)
            finally:
                await conn.close()
            assert await grants.revoke_run("r") == 1
            assert await grants.resolve(grant.id, int(time.time())) is registry.Resolution.REVOKED
        finally:
            await grants.close()


@pytest.mark.postgres
async def test_an_egress_only_row_given_a_value_or_another_kind_does_not_open(postgres_dsn: str) -> None:
    """Someone who can write the table turns the row into a Claude one: its associated data no longer
    matches (503, never a relayed credential); a value sealed into an egress row is refused too."""
    policy = egress.EgressPolicy.from_json({"allow": ["pypi.org:443"]})
    ring = KeyRing.from_spec(RING)
    grant = tokens.Grant(tokens.token_id("ifap_g"), "r", "s", int(time.time()) + 60, EGRESS_ONLY, egress=policy)
    async with fresh_database(postgres_dsn) as url:
        grants = await PostgresRegistry.open(Secret(url), ring, cache_ttl_s=0)
        conn = await asyncpg.connect(url)
        try:
            await grants.insert(grant)
            await conn.execute(
                "UPDATE ironflow.auth_proxy_grants SET credential_kind = 'api_key' WHERE id = $1", grant.id
            )
            with pytest.raises(crypto.SealBroken):
                await grants.resolve(grant.id, int(time.time()))
            sealed = ring.seal(b"sk-ant-smuggled", postgres.associated_data(grant.id, "egress", grant.expires_at))
            await conn.execute(
                "UPDATE ironflow.auth_proxy_grants SET credential_kind = 'egress', encrypted_credential = $2,"
                " nonce = $3, key_version = $4 WHERE id = $1",
                grant.id,
                sealed.ciphertext,
                sealed.nonce,
                sealed.key_version,
            )
            with pytest.raises(registry.RegistryUnavailable, match="malformed"):
                await grants.resolve(grant.id, int(time.time()))
        finally:
            await conn.close()
            await grants.close()
