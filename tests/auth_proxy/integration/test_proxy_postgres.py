"""The PostgreSQL registry against a real PostgreSQL server started by the suite.

Counterparts of the reference's ``backend.rs`` (run against both backends), its
live-DB ``postgres_auth_proxy_grants`` suite, and the replica cases of ``relay.rs``:
two proxy instances on one database, each with its own connection pool and token
cache, must agree within a second on every revocation.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest

from ironflow import migrations
from ironflow.auth_proxy import (
    AdminClient,
    AuthProxyConfig,
    Credential,
    KeyRing,
    MemoryRegistry,
    registry,
    run_auth_proxy,
    tokens,
)
from ironflow.auth_proxy.app import RunningProxy
from ironflow.auth_proxy.postgres import MIGRATIONS_PACKAGE, PostgresRegistry, rotate_keys
from ironflow.fake_model.server import FakeAnthropic
from ironflow.secrets import Secret
from ironflow.testing.polling import eventually
from ironflow.testing.postgres_server import PostgresServer, fresh_database

pytestmark = pytest.mark.postgres

ADMIN = "admin-key-" + "p" * 40
KEY1 = "1:" + "ab" * 32
KEY2 = "2:" + "cd" * 32
OAUTH = "sk-ant-oat01-POSTGRES-TEST-CREDENTIAL"
NOW = int(time.time())


def _soon(seconds: int) -> int:
    """An expiry from the clock at call time: the suite may run long after import."""
    return int(time.time()) + seconds


MESSAGE = {"model": "claude-haiku-5-0", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def dsn(postgres_database: str) -> str:
    """A fresh database per test on the session's server."""
    return postgres_database


@pytest.fixture(params=["memory", "postgres"])
async def backend(request: pytest.FixtureRequest, postgres_dsn: str) -> AsyncIterator[registry.GrantRegistry]:
    if request.param == "memory":
        yield MemoryRegistry()
        return
    async with fresh_database(postgres_dsn) as url:
        opened = await PostgresRegistry.open(Secret(url), KeyRing.from_spec(KEY1))
        try:
            yield opened
        finally:
            await opened.close()


def _grant(run_id: str = "run-1", expires_at: int = NOW + 600, value: str = OAUTH) -> tuple[tokens.Grant, str]:
    token = tokens.new_token().reveal()
    credential = tokens.ClaudeCredential("oauth_token", Secret(value))
    return tokens.Grant(tokens.token_id(token), run_id, "step", expires_at, credential), token


# --- backend.rs, on both backends ------------------------------------------------------------


async def test_insert_then_get_returns_grant(backend: registry.GrantRegistry) -> None:
    grant, _ = _grant()
    await backend.insert(grant)
    assert await backend.resolve(grant.id, NOW) == grant


async def test_remove_reports_whether_it_existed(backend: registry.GrantRegistry) -> None:
    grant, _ = _grant()
    await backend.insert(grant)
    assert await backend.revoke(grant.id) is True
    assert await backend.revoke(grant.id) is False


async def test_revoke_run_only_drops_that_run(backend: registry.GrantRegistry) -> None:
    mine, other = _grant("run-a")[0], _grant("run-b")[0]
    for grant in (mine, _grant("run-a")[0], other):
        await backend.insert(grant)
    assert await backend.revoke_run("run-a") == 2
    assert await backend.resolve(mine.id, NOW) is registry.Resolution.REVOKED
    assert await backend.resolve(other.id, NOW) == other


async def test_revoke_drops_the_grant_and_keeps_a_tombstone(backend: registry.GrantRegistry) -> None:
    grant, _ = _grant()
    await backend.insert(grant)
    await backend.revoke(grant.id)
    assert await backend.count() == 0
    assert await backend.resolve(grant.id, NOW) is registry.Resolution.REVOKED


async def test_revoke_unknown_id_records_nothing(backend: registry.GrantRegistry) -> None:
    assert await backend.revoke("f" * 64) is False
    assert await backend.resolve("f" * 64, NOW) is registry.Resolution.UNKNOWN


async def test_remove_does_not_keep_a_tombstone(backend: registry.GrantRegistry) -> None:
    """An expired grant is dropped on resolve without a tombstone: it then reads unknown."""
    grant, _ = _grant(expires_at=NOW + 5)
    await backend.insert(grant)
    assert await backend.resolve(grant.id, NOW + 5) is registry.Resolution.EXPIRED
    assert await backend.resolve(grant.id, NOW) is registry.Resolution.UNKNOWN


async def test_purge_expired_drops_tombstones_at_or_before_now(backend: registry.GrantRegistry) -> None:
    grant, _ = _grant(expires_at=NOW + 5)
    await backend.insert(grant)
    await backend.revoke(grant.id)
    await backend.purge_expired(NOW + 4)
    assert await backend.resolve(grant.id, NOW) is registry.Resolution.REVOKED
    await backend.purge_expired(NOW + 5)
    assert await backend.resolve(grant.id, NOW) is registry.Resolution.UNKNOWN


async def test_purge_expired_drops_grants_at_or_before_now(backend: registry.GrantRegistry) -> None:
    for expires_at in (NOW + 5, NOW + 6, NOW + 7):
        await backend.insert(_grant(expires_at=expires_at)[0])
    assert await backend.purge_expired(NOW + 6) == 2
    assert await backend.count() == 1


async def test_clones_share_grants(dsn: str) -> None:
    """Two registries on one database (two replicas) see each other's grants."""
    ring = KeyRing.from_spec(KEY1)
    first = await PostgresRegistry.open(Secret(dsn), ring)
    second = await PostgresRegistry.open(Secret(dsn), ring)
    try:
        grant, _ = _grant()
        await first.insert(grant)
        assert await second.resolve(grant.id, NOW) == grant
    finally:
        await first.close()
        await second.close()


async def test_registry_never_stores_the_token(dsn: str) -> None:
    """No column of any row holds the token or the credential in clear."""
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    try:
        grant, token = _grant()
        await opened.insert(grant)
    finally:
        await opened.close()
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT row_to_json(g)::text AS j, encrypted_credential FROM ironflow.auth_proxy_grants g"
        )
    finally:
        await conn.close()
    assert len(rows) == 1
    dump = rows[0]["j"] + bytes(rows[0]["encrypted_credential"]).decode(errors="replace")
    assert token not in dump
    assert OAUTH not in dump
    assert grant.id in dump


async def test_limits_and_usage_survive_in_the_database(dsn: str) -> None:
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    try:
        grant, _ = _grant()
        limited = tokens.Grant(grant.id, grant.run_id, grant.step, grant.expires_at, grant.credential,
                               tokens.Limits(models=("m",), max_requests=3))  # fmt: skip
        await opened.insert(limited)
        assert await opened.take_request(grant.id) == registry.Usage(0, 0)
        await opened.add_output_tokens(grant.id, 12)
        assert await opened.take_request(grant.id) == registry.Usage(1, 12)
        assert await opened.resolve(grant.id, NOW) == limited
    finally:
        await opened.close()


async def test_secret_credential_round_trips_through_columns(dsn: str) -> None:
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    try:
        token = tokens.new_token().reveal()
        secret = tokens.SecretCredential("gl", Secret("glpat-x"), tokens.Injection("header", header="X-T"), ("a.b.c",))
        grant = tokens.Grant(tokens.token_id(token), "r", "s", NOW + 60, secret)
        await opened.insert(grant)
        assert await opened.resolve(grant.id, NOW) == grant
    finally:
        await opened.close()


async def test_a_scoped_query_secret_round_trips_through_the_jsonb_spec_without_a_migration(dsn: str) -> None:
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    try:
        token = tokens.new_token().reveal()
        scope = tokens.Scope(methods=("GET", "HEAD"), paths=("/v1/items", "/v2/"))
        query = tokens.Injection("query", param="key")
        secret = tokens.SecretCredential("maps", Secret("k-1"), query, ("a.b.c",), scope)
        grant = tokens.Grant(tokens.token_id(token), "r", "s", NOW + 60, secret)
        await opened.insert(grant)
        assert await opened.resolve(grant.id, NOW) == grant
    finally:
        await opened.close()


# --- migrations --------------------------------------------------------------------------------


async def test_migrations_apply_once_under_concurrency(dsn: str) -> None:
    """Two replicas migrating at once: every file applied exactly once, a rerun applies nothing."""
    first, second = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        done = await asyncio.gather(
            migrations.migrate(first, "auth_proxy", MIGRATIONS_PACKAGE),
            migrations.migrate(second, "auth_proxy", MIGRATIONS_PACKAGE),
        )
        expected = [m.version for m in migrations.load(MIGRATIONS_PACKAGE)]
        assert sorted(done[0] + done[1]) == expected
        assert await migrations.migrate(first, "auth_proxy", MIGRATIONS_PACKAGE) == []
        recorded = await first.fetch("SELECT version FROM ironflow.schema_migrations WHERE component = 'auth_proxy'")
        assert sorted(r["version"] for r in recorded) == expected
    finally:
        await first.close()
        await second.close()


# --- replicas over HTTP ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _replicas(
    dsn: str,
) -> AsyncIterator[tuple[FakeAnthropic, RunningProxy, RunningProxy, AdminClient, aiohttp.ClientSession]]:
    """A fake upstream, two proxy replicas on one database, an admin client of the first, and HTTP."""
    async with FakeAnthropic() as fake:
        config = _config(dsn, fake.url)
        async with (
            run_auth_proxy(config) as first,
            run_auth_proxy(config) as second,
            first.admin_client() as admin,
            aiohttp.ClientSession() as http,
        ):
            yield fake, first, second, admin, http


def _config(dsn: str, upstream: str, ring: str = KEY1, active: int | None = None) -> AuthProxyConfig:
    return AuthProxyConfig(
        admin_key=Secret(ADMIN), upstream=upstream, database_url=Secret(dsn), key_ring=KeyRing.from_spec(ring, active)
    )


async def _status(http: aiohttp.ClientSession, url: str, token: str) -> int:
    async with http.post(url + "/v1/messages", json=MESSAGE, headers={"Authorization": f"Bearer {token}"}) as r:
        await r.read()
        return r.status


async def test_token_issued_by_one_replica_is_relayed_by_another_and_revocation_reaches_all(dsn: str) -> None:
    """Issue on A, relay on B (both cache it), revoke on A: B refuses within one second (measured)."""
    async with _replicas(dsn) as (fake, first, second, admin, http):
        issued = await admin.issue("run-r", "s", _soon(300), credential=Credential("oauth_token", Secret(OAUTH)))
        token = issued.token.reveal()
        assert await _status(http, second.url, token) == 200
        assert await _status(http, first.url, token) == 200
        assert await _status(http, second.url, token) == 200  # now served from B's cache
        started = time.perf_counter()
        assert await admin.revoke(issued.id)
        while await _status(http, second.url, token) != 401:
            assert time.perf_counter() - started < 1.0, "revocation did not reach the other replica within 1 s"
            await asyncio.sleep(0.005)
        elapsed_ms = (time.perf_counter() - started) * 1000
        print(f"revocation seen by the other replica after {elapsed_ms:.1f} ms")
        assert await _status(http, first.url, token) == 401
        assert fake.requests[0].header("authorization") == f"Bearer {OAUTH}"


async def test_revoke_run_on_one_replica_is_refused_by_the_other(dsn: str) -> None:
    async with _replicas(dsn) as (_fake, _first, second, admin, http):
        credential = Credential("api_key", Secret("sk-ant-api-x"))
        issued = [await admin.issue("run-z", f"s{i}", _soon(300), credential=credential) for i in range(3)]
        assert [await _status(http, second.url, t.token.reveal()) for t in issued] == [200] * 3
        assert await admin.revoke_run("run-z") == 3

        async def all_refused() -> bool:  # the bound itself (1 s) is measured by the test above
            return [await _status(http, second.url, t.token.reveal()) for t in issued] == [401] * 3

        await eventually(all_refused, what="the other replica to refuse every revoked token")


async def test_lost_listener_disables_the_cache_so_no_revocation_is_missed(dsn: str) -> None:
    """If B's LISTEN connection dies, B reads the database on every request until it is back."""
    async with _replicas(dsn) as (_fake, _first, second, admin, http):
        issued = await admin.issue("run-l", "s", _soon(300), credential=Credential("oauth_token", Secret(OAUTH)))
        token = issued.token.reveal()
        assert await _status(http, second.url, token) == 200
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%' AND datname = current_database()"
            )
            await asyncio.sleep(0.1)
            # Revoke straight in the database, bypassing NOTIFY: only a cache-less read sees it.
            await conn.execute("DELETE FROM ironflow.auth_proxy_grants WHERE id = $1", issued.id)
        finally:
            await conn.close()
        assert await _status(http, second.url, token) == 401


async def test_missing_key_version_answers_503_never_401(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A grant sealed under key 2 read by a replica that only has key 1: 503, the pod retries later."""
    async with (
        FakeAnthropic() as fake,
        run_auth_proxy(_config(dsn, fake.url, f"{KEY1},{KEY2}")) as new,
        run_auth_proxy(_config(dsn, fake.url, KEY1)) as old,
        new.admin_client() as admin,
        aiohttp.ClientSession() as http,
    ):
        issued = await admin.issue("run-k", "s", _soon(300), credential=Credential("oauth_token", Secret(OAUTH)))
        async with http.post(old.url + "/v1/messages", json=MESSAGE,
                             headers={"x-api-key": issued.token.reveal()}) as response:  # fmt: skip
            body = await response.json()
        assert response.status == 503
        assert body["error"] == {"type": "api_error", "message": "auth proxy token registry unavailable"}
        assert fake.requests == []


async def test_rotate_keys_reseals_grants_under_the_active_key(dsn: str) -> None:
    old_ring = KeyRing.from_spec(KEY1)
    opened = await PostgresRegistry.open(Secret(dsn), old_ring)
    grant, _ = _grant()
    try:
        await opened.insert(grant)
    finally:
        await opened.close()
    report = await rotate_keys(Secret(dsn), KeyRing.from_spec(f"{KEY1},{KEY2}"))
    assert (report.resealed, report.current, report.unreadable) == (1, 0, 0)
    assert (await rotate_keys(Secret(dsn), KeyRing.from_spec(f"{KEY1},{KEY2}"))).current == 1
    only_new = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY2))
    try:
        assert await only_new.resolve(grant.id, NOW) == grant
    finally:
        await only_new.close()


async def test_unreachable_database_is_unavailable_not_a_crash() -> None:
    with pytest.raises(registry.RegistryUnavailable) as caught:
        await PostgresRegistry.open(Secret("postgresql://u:hunter2@127.0.0.1:9/x"), KeyRing.from_spec(KEY1))
    assert "hunter2" not in str(caught.value)


# --- store-level checks (the reference's ironflow-store unit names) ------------------------------


async def test_credential_kind_round_trips(dsn: str) -> None:
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    try:
        for kind in ("oauth_token", "api_key"):
            token = tokens.new_token().reveal()
            credential = tokens.ClaudeCredential(kind, Secret(f"sk-ant-{kind}"))
            grant = tokens.Grant(tokens.token_id(token), "r", "s", NOW + 60, credential)
            await opened.insert(grant)
            assert await opened.resolve(grant.id, NOW) == grant
    finally:
        await opened.close()


async def test_claude_credential_has_no_secret_spec_and_schema_refuses_bad_rows(dsn: str) -> None:
    """The CHECK constraints: a known kind, and a secret spec exactly for secrets."""
    opened = await PostgresRegistry.open(Secret(dsn), KeyRing.from_spec(KEY1))
    grant, _ = _grant()
    try:
        await opened.insert(grant)
    finally:
        await opened.close()
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT secret_spec FROM ironflow.auth_proxy_grants WHERE id = $1", grant.id) is None
        insert = (
            "INSERT INTO ironflow.auth_proxy_grants (id, run_id, step, expires_at, credential_kind, secret_spec,"
            " encrypted_credential, nonce, key_version) VALUES ($1, 'r', 's', 1, $2, $3::jsonb, '\\x00', '\\x00', 1)"
        )
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(insert, "x1", "bogus_kind", None)  # unknown_credential_kind_is_an_error
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(insert, "x2", "secret", None)  # secret_row_without_spec_is_an_error
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(insert, "x3", "api_key", '{"name": "n"}')
    finally:
        await conn.close()


async def test_database_going_down_answers_503_never_401() -> None:
    """Stop the registry's PostgreSQL under a running proxy: cached or not, no pod is told 401."""
    server = PostgresServer()
    dsn_own = await asyncio.to_thread(server.start)
    try:
        async with FakeAnthropic() as fake:
            config = _config(dsn_own, fake.url)
            async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin, aiohttp.ClientSession() as http:
                credential = Credential("oauth_token", Secret(OAUTH))
                cached = (await admin.issue("run-d", "s", _soon(300), credential=credential)).token.reveal()
                never_seen = (await admin.issue("run-d", "t", _soon(300), credential=credential)).token.reveal()
                assert await _status(http, proxy.url, cached) == 200
                await asyncio.to_thread(server.stop)
                statuses: set[int] = set()

                async def unavailable() -> bool:
                    status = await _status(http, proxy.url, cached)
                    statuses.add(status)
                    return status == 503

                await eventually(unavailable, interval_s=0.05, what=lambda: f"a 503; statuses: {sorted(statuses)}")
                assert 401 not in statuses
                assert await _status(http, proxy.url, never_seen) == 503
                async with http.delete(
                    proxy.url + "/admin/v1/runs/run-d/tokens", headers={"Authorization": f"Bearer {ADMIN}"}
                ) as response:
                    assert response.status == 503
    finally:
        await asyncio.to_thread(server.stop)


async def test_malformed_database_url_is_unavailable_without_echoing_it() -> None:
    with pytest.raises(registry.RegistryUnavailable) as caught:
        await PostgresRegistry.open(Secret("postgresql://u:hunter2@127.0.0.1:notaport/x"), KeyRing.from_spec(KEY1))
    assert "hunter2" not in str(caught.value)
    assert caught.value.__cause__ is None
