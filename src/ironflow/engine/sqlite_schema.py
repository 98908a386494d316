"""The SQLite store's schema versions (data only): applied in order by :class:`~ironflow.engine.sqlite.SqliteStore`
and recorded in ``PRAGMA user_version``; the PostgreSQL store's are ``engine/migrations/*.sql``.
Never edit an applied version: a change is a new entry at the end."""

from __future__ import annotations

from typing import Final

__all__ = ["MIGRATIONS"]

#: Schema versions, applied in order and recorded in ``PRAGMA user_version``.
MIGRATIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE ironflow_runs (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        input TEXT,
        status TEXT NOT NULL,
        root_run_id TEXT NOT NULL,
        parent_run_id TEXT,
        backend TEXT,
        output TEXT,
        error TEXT,
        attempt INTEGER NOT NULL DEFAULT 0,
        worker TEXT,
        lease_until REAL,
        available_at REAL NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX ironflow_runs_due ON ironflow_runs (status, available_at) WHERE parent_run_id IS NULL;
    CREATE INDEX ironflow_runs_root ON ironflow_runs (root_run_id);
    CREATE TABLE ironflow_steps (
        run_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        result TEXT,
        error TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        child_run_id TEXT,
        labels TEXT,
        started_at REAL NOT NULL,
        finished_at REAL,
        PRIMARY KEY (run_id, position)
    );
    CREATE TABLE ironflow_rate_limits (
        account TEXT NOT NULL,
        window TEXT NOT NULL,
        scope TEXT NOT NULL,
        status TEXT NOT NULL,
        utilization REAL NOT NULL,
        resets_at REAL,
        recorded_at REAL NOT NULL,
        PRIMARY KEY (account, window, scope)
    );
    """,
    # 2: the transcripts of agent steps (engine/migrations/0002_transcripts.sql says what a row is).
    """
    CREATE TABLE ironflow_transcripts (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        position INTEGER NOT NULL,
        step TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        stream TEXT NOT NULL,
        content TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    # 3: a run's absolute deadline (engine/migrations/0003_run_deadline.sql).
    """
    ALTER TABLE ironflow_runs ADD COLUMN deadline_at REAL;
    """,
)
