"""The store the UI tests serve, opened on ``store_url`` (``tests/fakes/stores.py``: SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ironflow.engine.store import Store, open_store


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    await opened.open()
    yield opened
    await opened.close()
