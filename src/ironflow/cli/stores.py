"""``--store`` of ``run``, ``worker`` and ``runs …``: the option, opening the store with the
documented exit codes (a bad URL 2, an unreachable database 3), and running a command's coroutine.

The store is ``--store URL``, else ``$IRONFLOW_STORE``, else a SQLite file in the user's data dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Annotated, Any, TypeVar

import typer

from ironflow import errors
from ironflow.cli import exits
from ironflow.engine import model
from ironflow.engine.store import Store, open_store

__all__ = ["StoreOption", "opened", "plain", "run_async"]

T = TypeVar("T")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", help="Store URL: sqlite:///path or postgresql://… (default $IRONFLOW_STORE).", show_default=False
    ),
]


@contextlib.asynccontextmanager
async def opened(url: str | None, *, create: bool = True) -> AsyncIterator[Store]:
    """The open store of ``url``, closed after the block; a bad URL or an unreachable store exits.

    ``create=False`` for the commands that only read or change runs: they never make directories.
    """
    try:
        store = open_store(url, create=create)
        await store.open()
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    try:
        yield store
    finally:
        await store.close()


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` for a command: Ctrl-C exits 130 with one line."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        exits.fail("interrupted", exits.EXIT_INTERRUPTED)


def plain(value: Any) -> Any:
    """Stored values as plain JSON (agent results become dicts)."""
    return json.loads(model.to_json(value, what="the value"))
