"""A one-shot read of a SQLite store (:mod:`ironflow.engine.sqlite_reads`) is the store's own read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.engine import model, sqlite_reads, store_urls
from ironflow.engine.sqlite import SqliteStore


def _seed(path: Path, count: int) -> SqliteStore:
    store = SqliteStore(path)

    async def seed() -> None:
        await store.open()
        for index in range(count):
            status = model.RunStatus.FAILED if index % 3 == 0 else model.RunStatus.SUCCEEDED
            run = model.RunRecord(id=model.new_id(), workflow=f"flows/w.py:w{index}", input={"i": index}, status=status)
            await store.create_run(run)

    asyncio.run(seed())
    return store


@pytest.mark.parametrize(
    ("status", "limit"), [(None, 50), (None, 4), (model.RunStatus.FAILED, 50), (model.RunStatus.RUNNING, 5)]
)
def test_the_one_shot_read_is_the_stores(tmp_path: Path, status: model.RunStatus | None, limit: int) -> None:
    path = tmp_path / "engine.db"
    store = _seed(path, 10)

    async def stores_read() -> list[model.RunRecord]:
        try:
            return await store.list_runs(status=status, limit=limit)
        finally:
            await store.close()

    expected = asyncio.run(stores_read())
    assert sqlite_reads.list_runs(path, status=status, limit=limit) == expected
    assert expected or status is model.RunStatus.RUNNING


def test_a_missing_store_is_one_config_error_and_nothing_is_made(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="no SQLite store"):
        sqlite_reads.list_runs(tmp_path / "absent" / "engine.db")
    assert list(tmp_path.iterdir()) == []


def test_an_old_file_is_migrated_first(tmp_path: Path) -> None:
    """A store file made before the schema (empty) is brought up to date, as the store's open does."""
    path = tmp_path / "engine.db"
    path.touch()
    assert sqlite_reads.list_runs(path) == []


@pytest.mark.parametrize(
    ("url", "path"),
    [("sqlite:///a/b.db", "/a/b.db"), ("rel/x.db", "rel/x.db"), ("postgresql://h/db", None), ("postgres://h/db", None)],
)
def test_a_store_url_names_its_file(url: str, path: str | None) -> None:
    assert store_urls.sqlite_path(url) == path


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "mysql://h/db"])
def test_a_bad_store_url_is_a_config_error(url: str) -> None:
    with pytest.raises(errors.ConfigError):
        store_urls.sqlite_path(url)
