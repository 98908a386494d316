"""``--store`` of ``run``, ``worker``, ``runs …``, ``logs`` and ``ps``: the option, opening the
store with the documented exit codes (a bad URL 2, an unreachable database 3), finding the run a
command names, and running a command's coroutine.

The store is ``--store URL``, else ``$IRONFLOW_STORE``, else a SQLite file in the user's data dir.
Every command that takes a run id takes it through :func:`find_run`: the whole id, or its start
when exactly one run's id starts so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ironflow import errors
from ironflow.cli import exits
from ironflow.engine import model

if TYPE_CHECKING:
    from ironflow.engine.store import Store

__all__ = ["find_run", "opened", "plain", "run_async"]

T = TypeVar("T")


@contextlib.asynccontextmanager
async def opened(url: str | None, *, create: bool = True) -> AsyncIterator[Store]:
    """The open store of ``url``, closed after the block; a bad URL or an unreachable store exits.

    ``create=False`` for the commands that only read or change runs: they never make directories.
    """
    from ironflow.engine.store import open_store  # its drivers load with it: only a command that opens a store

    try:
        store = open_store(url, create=create)
        await store.open()
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    try:
        yield store
    finally:
        await store.close()


async def find_run(store: Store, ref: str) -> model.RunRecord:
    """The run ``ref`` names (:func:`~ironflow.engine.run_refs.match_run`, as the UI takes it: its
    whole id, else the one run whose id starts with it); exits 2 on none, naming a few when several do."""
    from ironflow.engine import run_refs

    if not ref:
        exits.fail("a run id cannot be empty; list runs with `ironflow runs list`")
    found = await run_refs.match_run(store, ref)
    if found.run is not None:
        return found.run
    if found.ambiguous:
        exits.fail(str(found.problem))
    exits.fail(f"{found.problem}; list runs with `ironflow runs list`")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` for a command: Ctrl-C exits 130 with one line, and an ironflow error that
    escapes it (the store failing mid-command) exits with its branch's code and one line."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        exits.fail("interrupted", exits.EXIT_INTERRUPTED)
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def plain(value: Any) -> Any:
    """Stored values as plain JSON (agent results become dicts)."""
    return json.loads(model.to_json(value, what="the value"))
