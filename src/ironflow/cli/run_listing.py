"""What ``ironflow runs list`` does once its options are read: the store's runs, newest first, as
a table or a document.

The Typer command (:mod:`ironflow.cli.runs`) and its common call read without Typer
(:mod:`ironflow.cli.quick`) both land here. A SQLite store is read on this thread
(:mod:`ironflow.engine.sqlite_reads`: no event loop to start); a PostgreSQL one through the store.
"""

from __future__ import annotations

import time
from typing import Any

from ironflow import errors
from ironflow.cli import exits, tables
from ironflow.cli.formats import OutputFormat, age, document
from ironflow.engine import model, sqlite_reads, store_urls

__all__ = ["run"]


def _run_summary(run: model.RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "workflow": run.workflow,
        "status": str(run.status),
        "attempt": run.attempt,
        "root_run_id": run.root_run_id,
        "parent_run_id": run.parent_run_id,
        "backend": run.backend,
        "created_at": run.created_at,
        "deadline_at": run.deadline_at,
    }


async def _list(store_url: str | None, status: model.RunStatus | None, limit: int) -> list[model.RunRecord]:
    from ironflow.cli.stores import opened  # the store's event loop: a PostgreSQL store's alone

    async with opened(store_url, create=False) as store:
        return await store.list_runs(status=status, limit=limit)


def _found(store_url: str | None, status: model.RunStatus | None, limit: int) -> list[model.RunRecord]:
    """The runs; every error is one line with its exit code (a bad URL or no store 2, SQLite failing 3)."""
    try:
        path = store_urls.sqlite_path(store_url or store_urls.default_store_url())
        if path is not None:
            return sqlite_reads.list_runs(path, status=status, limit=limit)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    from ironflow.cli.stores import run_async

    return run_async(_list(store_url, status, limit))


def run(
    *,
    store: str | None = None,
    status: model.RunStatus | None = None,
    limit: int = 50,
    output: OutputFormat = OutputFormat.TABLE,
) -> None:
    """Print the runs of ``store`` (else ``$IRONFLOW_STORE``, else the default), ``status`` only, at most ``limit``."""
    found = _found(store, status, limit)
    if output is not OutputFormat.TABLE:
        print(document([_run_summary(r) for r in found], output))
        return
    table = tables.new("RUN", "WORKFLOW", "STATUS", "ATTEMPT", "PARENT", "AGE")
    now = time.time()
    for r in found:
        table.add_row(r.id, r.workflow.rsplit("/", 1)[-1], str(r.status), str(r.attempt), r.parent_run_id or "-",
                      age(now - r.created_at))  # fmt: skip
    print(tables.render(table, width=tables.stdout_width()))
