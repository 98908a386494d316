"""pytest plugin of shared fixtures for suites that need real components.

Load it with ``-p ironflow.testing.pytest_plugin``. ``postgres_dsn`` starts one
throwaway PostgreSQL server per test session (see :mod:`ironflow.testing.postgres_server`)
and removes it at the end; ``postgres_database`` gives each test a fresh, empty
database on it (dropped afterwards). When PostgreSQL is not installed the test is skipped with a reason
that says so, never silently passed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from ironflow.testing import postgres_server

__all__ = ["postgres_database", "postgres_dsn"]


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of a real PostgreSQL server shared by the whole session."""
    try:
        postgres_server.find_pg_bin("initdb")
        postgres_server.find_pg_bin("pg_ctl")
    except postgres_server.PostgresNotAvailable as exc:
        pytest.skip(f"PostgreSQL is not installed: {exc}")
    server = postgres_server.PostgresServer()
    server.start()
    try:
        yield server.dsn
    finally:
        server.stop()


@pytest.fixture
async def postgres_database(postgres_dsn: str) -> AsyncIterator[str]:
    """DSN of a fresh, empty database for this test only."""
    async with postgres_server.fresh_database(postgres_dsn) as dsn:
        yield dsn
