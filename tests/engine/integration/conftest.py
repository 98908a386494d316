"""The store the transcript, ``logs`` and ``ps`` tests run on: a SQLite file, or a fresh database
on the session's PostgreSQL server, by URL (as ``--store`` takes it)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'engine.db'}"
    return str(request.getfixturevalue("postgres_database"))
