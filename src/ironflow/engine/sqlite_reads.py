"""The SQLite store's file: its connection, its schema's migration, and the reads a command makes
without an event loop (``ironflow runs list``).

:class:`~ironflow.engine.sqlite.SqliteStore` runs the same connection, migration and queries on
its thread; a one-shot read here is the same SQL on the caller's own thread, so ``runs list``
starts no event loop (asyncio with its ssl is three Python starts of import alone).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Final

from ironflow import errors
from ironflow.engine import model, rows, sqlite_schema

__all__ = ["RUN_COLUMNS", "SELECT_RUN", "connect", "list_runs", "migrate", "runs_query"]

RUN_COLUMNS: Final = (
    "id, workflow, input, status, root_run_id, parent_run_id, backend, output, error, attempt, worker, "
    "lease_until, available_at, cancel_requested, created_at, updated_at, deadline_at"
)

# Only constants are interpolated into these statements; every value is a parameter.
SELECT_RUN: Final = f"SELECT {RUN_COLUMNS} FROM ironflow_runs"  # noqa: S608


def connect(path: Path, *, busy_timeout_s: float, create: bool) -> sqlite3.Connection:
    """A connection to the store's file in WAL mode; ``create=False`` refuses a file (or directory)
    that is not there rather than making it."""
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.is_file():  # a reader never makes a store (or its directory) it cannot find
        missing = "file" if path.parent.is_dir() else "directory"
        raise errors.ConfigError(
            f"no SQLite store at {str(path)!r}: its {missing} does not exist; check --store / IRONFLOW_STORE"
        )
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema up to date (one process at a time)."""
    conn.execute("BEGIN IMMEDIATE")  # one process migrates at a time
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(sqlite_schema.MIGRATIONS, start=1):
            if number > version:
                for statement in filter(str.strip, script.split(";")):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def runs_query(
    *,
    status: model.RunStatus | None = None,
    root_run_id: str | None = None,
    workflow: str | None = None,
    top_level: bool = False,
    before: str | None = None,
    limit: int = 50,
) -> tuple[str, list[Any]]:
    """The statement and parameters of :meth:`~ironflow.engine.store.Store.list_runs` (pure)."""
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append("status = ?")
        params.append(str(status))
    if root_run_id is not None:
        clauses.append("root_run_id = ?")
        params.append(root_run_id)
    if workflow is not None:
        clauses.append("(workflow = ? OR substr(workflow, -(length(?) + 1)) = '/' || ?)")
        params += [workflow, workflow, workflow]
    if top_level:
        clauses.append("parent_run_id IS NULL")
    if before is not None:
        clauses.append("id < ?")
        params.append(before)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"{SELECT_RUN} {where} ORDER BY id DESC LIMIT ?", [*params, limit]


def list_runs(
    path: str | Path, *, status: model.RunStatus | None = None, limit: int = 50, busy_timeout_s: float = 10.0
) -> list[model.RunRecord]:
    """The runs of the store at ``path``, newest first, as the store's ``list_runs`` reads them; it
    never makes the file. Raises: ConfigError (no such store, or it cannot be opened),
    InfrastructureError (SQLite failed, e.g. still locked after the busy timeout)."""
    try:
        conn = connect(Path(path), busy_timeout_s=busy_timeout_s, create=False)
    except sqlite3.Error as exc:
        raise errors.ConfigError(f"cannot open the SQLite store {str(path)!r}: {exc}") from exc
    try:
        try:
            migrate(conn)
        except sqlite3.Error as exc:
            raise errors.ConfigError(f"cannot open the SQLite store {str(path)!r}: {exc}") from exc
        query, params = runs_query(status=status, limit=limit)
        try:
            return [rows.run_from_row(r) for r in conn.execute(query, params).fetchall()]
        except sqlite3.Error as exc:
            raise errors.InfrastructureError(f"the SQLite store failed: {type(exc).__name__}: {exc}") from exc
    finally:
        conn.close()
