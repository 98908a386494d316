"""The ``store_url`` fixture (a plugin of ``tests/conftest.py``): a SQLite file, or a fresh database
on the session's PostgreSQL server, by URL (as ``--store`` takes it), so a test that takes it runs
on both stores. A test module that needs another store defines its own ``store_url``."""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["store_url"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'engine.db'}"
    return str(request.getfixturevalue("postgres_database"))
