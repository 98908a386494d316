"""The throwaway PostgreSQL server helper: starts as a non-root user, serves, leaves nothing."""

from __future__ import annotations

import os

import asyncpg
import pytest

from ironflow.testing.postgres_server import PostgresNotAvailable, PostgresServer, find_pg_bin

pytestmark = pytest.mark.postgres


def _require_postgres() -> None:
    try:
        find_pg_bin("initdb")
    except PostgresNotAvailable as exc:
        pytest.skip(str(exc))


async def test_async_server_serves_a_named_database_and_removes_its_directory() -> None:
    _require_postgres()
    server = PostgresServer(database="ironflow_test")
    async with server as dsn:
        assert dsn.startswith("postgresql://postgres@127.0.0.1:")
        assert dsn.endswith("/ironflow_test")
        tmp = server._tmp
        assert tmp is not None
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT current_database()") == "ironflow_test"
            assert await conn.fetchval("SHOW fsync") == "off"
            assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
        finally:
            await conn.close()
    assert not os.path.exists(tmp)  # noqa: ASYNC240 - one stat after the server is gone
    with pytest.raises(PostgresNotAvailable, match="not running"):
        _ = server.dsn


def test_missing_binaries_are_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("ironflow.testing.postgres_server._SEARCH_GLOB", "/nonexistent/*/bin")
    with pytest.raises(PostgresNotAvailable, match="apt-get install -y postgresql-15"):
        find_pg_bin("initdb")


@pytest.mark.parametrize("attempt", [1, 2])
async def test_postgres_database_fixture_is_fresh_for_each_test(postgres_database: str, attempt: int) -> None:
    """Both runs find an empty database: the first run's table is gone."""
    conn = await asyncpg.connect(postgres_database)
    try:
        tables = await conn.fetchval("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
        await conn.execute("CREATE TABLE leftover (x int)")
    finally:
        await conn.close()
    assert tables == 0
