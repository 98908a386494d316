"""The engine's stores for its integration tests: a fresh SQLite file, or a fresh database on the
session's real PostgreSQL server (tests never share tables)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from ironflow.engine.postgres import PostgresStore
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.store import Store


async def fresh_database(server_dsn: str) -> str:
    """The DSN of a new, empty database on the session's server (tests do not share tables)."""
    database = f"engine_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f"CREATE DATABASE {database}")
    finally:
        await conn.close()
    return server_dsn.rsplit("/", 1)[0] + "/" + database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store: a SQLite file, or a new database on the session's PostgreSQL server."""
    opened: Store
    if request.param == "sqlite":
        opened = SqliteStore(tmp_path / "engine.db")
    else:
        opened = PostgresStore(await fresh_database(request.getfixturevalue("postgres_dsn")), max_size=4)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
